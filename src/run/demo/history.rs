//! A week of simulated history for the demo targets, so a first `vigil run --demo` shows
//! baselines, thresholds, sparklines, reports and breaker history at once.
//!
//! One probe a minute per target is simulated for [`DAYS`] days (diurnal latency, log-normal
//! jitter, a heavy tail, one past incident for every few targets) and fed through the same
//! daemon's [`Baselines`](crate::decide::baseline::Baselines), so the stored hourly rollups are exactly
//! what the daemon would have persisted from those probes; each target's probes also go through
//! its own [`Breaker`](crate::decide::breaker::Breaker), judged against the week's TTFB P95 (the daemon
//! uses the rolling one), which gives the breaker history and states at `now`. The raw samples stored
//! for `report` and the weekly summary are a sparser, evenly spaced subset (one probe in
//! [`STORE_EVERY`]): the daemon's rollups count every probe, a week of raw rows is not needed
//! to show the figures. Credit readings of the metered demo provider drain over the week at the live
//! key's rate, with its auto top-ups, to the $2.50 the live key reports at start.

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Duration, Timelike, Utc};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use uuid::Uuid;

use super::demo_credit;
use super::demo_providers;
use super::profiles;
use super::profiles::Profile;
use super::profiles::Wire;
use super::profiles::JITTER_SIGMA;
use super::profiles::SPIKE_FACTOR;
use super::profiles::SPIKE_PROBABILITY;
use super::profiles::TTFB_SHARE;
use super::CREDIT_BURN_USD_PER_HOUR;
use super::CREDIT_USED_AT_START_USD;
use crate::config::Config;
use crate::decide::baseline::{Baselines, LatencyP95};
use crate::decide::breaker::{Breaker, BreakerSettings, Probe};
use crate::io::probe::Planned;
use crate::io::store::{SampleQuery, Store, StoreError};
use crate::vocab::records::{BalanceReading, Rollup};
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::Target;

/// Days of history seeded.
pub const DAYS: i64 = 7;
/// One simulated probe in this many is stored as a raw sample (rollups count all of them).
pub const STORE_EVERY: i64 = 5;
/// Every this many targets (in plan order), one has had an incident in the past week.
pub const INCIDENT_EVERY: usize = 3;
/// An incident: this many minutes of degraded latency…
const INCIDENT_DEGRADED_MIN: i64 = 12;
/// …then this many minutes of failures (the breaker opens, half-opens, and closes after).
const INCIDENT_FAILING_MIN: i64 = 18;
/// How much slower a degraded host answers.
const INCIDENT_FACTOR: f64 = 4.0;
/// Share of probes that land in the heavy tail, and the Pareto shape of that tail.
const TAIL_SHARE: f64 = 0.03;
const TAIL_ALPHA: f64 = 1.6;
/// Tail multipliers are capped here, as the probe's own timeout would.
const TAIL_CAP: f64 = 8.0;
/// Diurnal swing of latency (± this share), slowest at [`PEAK_HOUR_UTC`].
const DIURNAL_SWING: f64 = 0.3;
const PEAK_HOUR_UTC: f64 = 15.0;
/// The history starts this much short of [`DAYS`], so a report run right after seeding finds
/// nothing in "the 7 days before" (a few boundary probes would make a misleading comparison).
pub const SPARE_MINUTES: i64 = 10;
/// Rows per insert.
const BATCH: usize = 5_000;
/// Seed of the simulation: the same history on every machine.
pub const SEED: u64 = 0x005E_ED0F_DE30;

/// What was seeded, and how long it took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seeded {
    /// Targets simulated.
    pub targets: usize,
    /// Probes simulated (all of them are in the rollups).
    pub probes: u64,
    /// Raw samples stored.
    pub samples: u64,
    /// Rollup rows stored.
    pub rollups: u64,
    /// Breaker transitions stored.
    pub transitions: u64,
    /// Credit readings stored.
    pub readings: u64,
    /// Wall time of the whole seeding, seconds.
    pub seconds: f64,
}

/// The demo's targets in `region` (the same ids the daemon probes).
pub fn demo_targets(region: &str) -> Vec<Target> {
    // The origin only shapes base URLs, which are not part of a target's identity.
    let providers: Vec<_> =
        demo_providers("http://127.0.0.1:1").unwrap_or_default().into_iter().map(Arc::new).collect();
    Planned::all(&providers, region).into_iter().map(|p| p.target).collect()
}

/// Seeds the history when the store holds neither a sample nor a rollup of `config.region`
/// from the last [`DAYS`] days; `None` when it held some (a demo that ran before, or data
/// someone put there).
pub async fn seed_if_empty(
    store: &dyn Store,
    config: &Config,
    now: DateTime<Utc>,
) -> Result<Option<Seeded>, StoreError> {
    let q = SampleQuery { region: Some(config.region.clone()), limit: Some(1), ..SampleQuery::default() };
    if store.count_samples(&q).await? > 0 {
        return Ok(None);
    }
    let since = now - Duration::days(DAYS);
    if !store.rollups_between(Some(&config.region), since, Some(now + Duration::hours(1))).await?.is_empty() {
        return Ok(None);
    }
    let seeded = seed(store, config, now).await?;
    tracing::info!(
        targets = seeded.targets,
        probes = seeded.probes,
        samples = seeded.samples,
        rollups = seeded.rollups,
        transitions = seeded.transitions,
        seconds = format!("{:.2}", seeded.seconds),
        "demo: seeded {DAYS} days of simulated history"
    );
    Ok(Some(seeded))
}

/// Simulates [`DAYS`] days ending at `now` for every demo target and stores the result.
pub async fn seed(store: &dyn Store, config: &Config, now: DateTime<Utc>) -> Result<Seeded, StoreError> {
    let started = Instant::now();
    let history = simulate(config, now, SEED);
    let mut seeded = Seeded {
        targets: history.targets,
        probes: history.probes,
        transitions: history.transitions.len() as u64,
        readings: history.readings.len() as u64,
        ..Seeded::default()
    };
    for batch in history.samples.chunks(BATCH) {
        seeded.samples += store.insert_samples(batch).await?;
    }
    for batch in history.rollups.chunks(BATCH) {
        store.upsert_rollups(batch).await?;
        seeded.rollups += batch.len() as u64;
    }
    for t in &history.transitions {
        store.append_transition(t).await?;
    }
    for b in &history.breakers {
        store.save_breaker(b).await?;
    }
    for r in &history.readings {
        store.insert_balance(r).await?;
    }
    seeded.seconds = started.elapsed().as_secs_f64();
    Ok(seeded)
}

/// A simulated week, ready to store.
#[derive(Debug, Default)]
pub struct History {
    /// Targets simulated.
    pub targets: usize,
    /// Probes simulated.
    pub probes: u64,
    /// The stored subset of the probes.
    pub samples: Vec<Sample>,
    /// Every hour's rollups as the daemon would have persisted them.
    pub rollups: Vec<Rollup>,
    /// Breaker transitions the probes caused.
    pub transitions: Vec<crate::vocab::records::BreakerTransition>,
    /// Breaker states at `now`.
    pub breakers: Vec<crate::vocab::records::BreakerRecord>,
    /// Credit readings of metered providers.
    pub readings: Vec<BalanceReading>,
}

/// The past incident of a target: when it starts.
fn incident_start(index: usize, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (index % INCIDENT_EVERY == INCIDENT_EVERY - 1).then(|| {
        let days_ago = 1 + (index / INCIDENT_EVERY) as i64 % (DAYS - 1);
        let at = now - Duration::days(days_ago) - Duration::hours(3 * (index as i64 % 5));
        at.with_second(0).unwrap_or(at)
    })
}

/// Runs the simulation (pure: same `config`, `now` and `seed`, same history).
pub fn simulate(config: &Config, now: DateTime<Utc>, seed: u64) -> History {
    let targets = demo_targets(&config.region);
    let minutes = DAYS * 24 * 60 - SPARE_MINUTES;
    let start = now - Duration::minutes(minutes);
    let mut rng = StdRng::seed_from_u64(seed);
    let tokens = profiles::reply_tokens(config.probe.max_tokens).len();
    let mut history = History { targets: targets.len(), ..History::default() };
    // Per target, in time order: what the prober would have reported each minute.
    let mut probes: Vec<Vec<Sample>> = Vec::with_capacity(targets.len());
    for (i, target) in targets.iter().enumerate() {
        let profile = profile_of(target);
        let incident = incident_start(i, now);
        // Stable offsets inside the minute, as the scheduler spreads a round.
        let offset = Duration::milliseconds((i as i64 * 6_700) % 60_000);
        let mut series = Vec::with_capacity(minutes as usize);
        for minute in 0..minutes {
            let at = start + Duration::minutes(minute) + offset;
            if at > now {
                break;
            }
            let phase = incident.and_then(|s| match (at - s).num_minutes() {
                m if (0..INCIDENT_DEGRADED_MIN).contains(&m) => Some(Phase::Degraded),
                m if (INCIDENT_DEGRADED_MIN..INCIDENT_DEGRADED_MIN + INCIDENT_FAILING_MIN).contains(&m) => {
                    Some(Phase::Failing)
                }
                _ => None,
            });
            series.push(probe(&mut rng, target, profile, phase, at, tokens));
        }
        probes.push(series);
    }
    // Rollups: the same hourly histograms and counts the daemon persists, from every probe.
    let mut baselines = Baselines::new(&config.baseline);
    for series in &probes {
        for s in series {
            baselines.record(s);
        }
    }
    history.rollups = baselines.dirty_rollups();
    // Breakers: each target's probes through its own breaker, judged against the week's TTFB and
    // TTFT P95s once as many probes as a published P95 needs have been seen (none before).
    let settings = BreakerSettings::from_config(&config.breaker, crate::decide::health::Failover::of(&config.baseline));
    for (target, series) in targets.iter().zip(&probes) {
        let week_p95 = |metric: fn(&Sample) -> Option<f64>| {
            let mut v: Vec<f64> = series.iter().filter(|s| s.outcome == Outcome::Ok).filter_map(metric).collect();
            v.sort_by(f64::total_cmp);
            v.get((v.len() as f64 * 0.95) as usize).copied()
        };
        let p95 = LatencyP95 { ttfb: week_p95(|s| s.ttfb_ms), ttft: week_p95(|s| s.ttft_ms) };
        let mut breaker = Breaker::new(settings, start);
        for (n, s) in series.iter().enumerate() {
            if let Some(tr) = breaker.tick(s.started_at) {
                history.transitions.push(tr.to_record(target));
            }
            let judged = if n as u64 >= config.baseline.min_samples_p95 { p95 } else { LatencyP95::default() };
            if let Some(tr) = breaker.observe(Probe::from(s), judged, s.started_at) {
                history.transitions.push(tr.to_record(target));
            }
        }
        if let Some(tr) = breaker.tick(now) {
            history.transitions.push(tr.to_record(target));
        }
        history.breakers.push(breaker.to_record(target));
        history.probes += series.len() as u64;
        history.samples.extend(series.iter().step_by(STORE_EVERY as usize).cloned());
    }
    history.transitions.sort_by_key(|t| t.at);
    history.samples.sort_by_key(|s| s.started_at);
    history.readings = readings(config, start, now);
    history
}

/// Hourly credit readings of every demo provider with a `balance` setting: the live key's burn
/// and top-ups ([`demo_credit`]) run backwards from what it reports at start, steady so the
/// projection from the last day says what the live key will: empty about 5 hours after `now`.
fn readings(config: &Config, start: DateTime<Utc>, now: DateTime<Utc>) -> Vec<BalanceReading> {
    let providers = demo_providers("http://127.0.0.1:1").unwrap_or_default();
    let hours = DAYS * 24;
    let mut out = Vec::new();
    for p in providers.iter().filter(|p| p.balance.is_some()) {
        let reading = |at: DateTime<Utc>| {
            let before = (now - at).num_seconds() as f64 / 3600.0;
            let (_, remaining_usd) = demo_credit(CREDIT_USED_AT_START_USD - CREDIT_BURN_USD_PER_HOUR * before);
            BalanceReading { provider: p.name.clone(), region: config.region.clone(), at, remaining_usd }
        };
        out.extend((0..hours).map(|h| start + Duration::hours(h)).filter(|at| *at < now).map(reading));
        out.push(reading(now));
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Degraded,
    Failing,
}

/// The simulated host behind a demo target (`None` for the plain-HTTP status page).
fn profile_of(t: &Target) -> Option<&'static Profile> {
    let route = t.route.as_deref().unwrap_or("");
    [Wire::OpenRouter, Wire::Anthropic, Wire::Gemini].into_iter().find_map(|w| profiles::find(w, &t.model, route))
}

/// −1…1 over the UTC day, 1 at the peak hour.
fn diurnal(at: DateTime<Utc>) -> f64 {
    let hour = f64::from(at.hour()) + f64::from(at.minute()) / 60.0;
    ((hour - PEAK_HOUR_UTC) / 24.0 * std::f64::consts::TAU).cos()
}

/// One simulated probe, shaped as the prober reports it.
fn probe(
    rng: &mut StdRng,
    target: &Target,
    profile: Option<&Profile>,
    phase: Option<Phase>,
    at: DateTime<Utc>,
    tokens: usize,
) -> Sample {
    let mut s = Sample::new(target.clone(), at, at + Duration::milliseconds(rng.random_range(0..4)));
    s.id = Uuid::from_u128(rng.random());
    let jitter = |rng: &mut StdRng| (JITTER_SIGMA * rng.sample::<f64, _>(StandardNormal)).exp();
    let mut factor = (1.0 + DIURNAL_SWING * diurnal(at)) * jitter(rng);
    if rng.random_bool(SPIKE_PROBABILITY) {
        factor *= SPIKE_FACTOR;
    }
    if rng.random_bool(TAIL_SHARE) {
        let u: f64 = rng.random_range(0.0..1.0);
        factor *= (1.0 - u).powf(-1.0 / TAIL_ALPHA).min(TAIL_CAP);
    }
    if phase == Some(Phase::Degraded) {
        factor *= INCIDENT_FACTOR;
    }
    s.dns_ms = Some(0.05 * jitter(rng));
    s.connect_ms = Some(0.1 * jitter(rng));
    let Some(p) = profile else {
        // The status page: a small JSON document, no tokens.
        let ttfb = rng.random_range(5.0..30.0) * factor;
        s.ttfb_ms = Some(ttfb);
        s.total_ms = Some(ttfb + 0.3);
        s.status = Some(if phase == Some(Phase::Failing) { 503 } else { 200 });
        if phase == Some(Phase::Failing) {
            s.outcome = Outcome::ServerError;
            s.error = Some("503 Service Unavailable".into());
        }
        return s;
    };
    let ttft = p.ttft_ms * factor;
    let ttfb = ttft * TTFB_SHARE;
    s.ttfb_ms = Some(ttfb);
    let failing = phase == Some(Phase::Failing) || rng.random_bool((p.error_pct / 100.0).clamp(0.0, 1.0));
    if failing {
        let (status, message) = match p.wire {
            Wire::Anthropic => (529, "overloaded_error: Overloaded"),
            Wire::Gemini => (503, "UNAVAILABLE: The model is overloaded. Please try again later."),
            Wire::OpenRouter => (503, "server_is_overloaded: The server is overloaded or not ready yet."),
        };
        s.status = Some(status);
        s.outcome = Outcome::ServerError;
        s.error = Some(message.into());
        s.total_ms = Some(ttfb + 1.0);
        return s;
    }
    let gaps: f64 = (1..tokens.max(1)).map(|_| 1000.0 / p.tokens_per_s * jitter(rng)).sum();
    let total = ttft + gaps;
    let prompt = 42;
    s.ttft_ms = Some(ttft);
    s.total_ms = Some(total);
    s.input_tokens = Some(prompt);
    s.output_tokens = Some(tokens as u32);
    s.tokens_per_s = (tokens > 1 && gaps > 0.0).then(|| (tokens as f64 - 1.0) / (gaps / 1000.0));
    s.status = Some(200);
    s.adherence_ok = Some(true);
    s.cost_usd = Some(p.cost(prompt, tokens as u32));
    s.request_id = Some(format!("gen-demo-{}", s.id.simple()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::demo::{CREDIT_LIMIT_USD, CREDIT_TOP_UP_AT_USD};
    use std::collections::BTreeMap;

    fn config() -> Config {
        Config::from_toml("", &BTreeMap::<String, String>::new()).expect("defaults")
    }

    #[test]
    fn a_week_gives_every_target_a_published_p95_and_some_targets_an_incident() {
        let c = config();
        let now = Utc::now();
        let h = simulate(&c, now, SEED);
        let targets = demo_targets(&c.region);
        assert_eq!(h.targets, targets.len());
        let minutes = (DAYS * 24 * 60 - SPARE_MINUTES) as u64;
        let n = targets.len() as u64;
        assert!(h.probes <= minutes * n && h.probes >= (minutes - 1) * n, "{}", h.probes);
        assert!(h.samples.len() as u64 * STORE_EVERY as u64 >= h.probes - targets.len() as u64);
        assert!(h.samples.iter().all(|s| s.started_at <= now && s.started_at >= now - Duration::days(DAYS)));
        // Every incident opened a breaker and it closed again.
        let incidents = targets.iter().enumerate().filter(|(i, _)| incident_start(*i, now).is_some()).count();
        assert!(incidents >= 2, "{incidents}");
        let opened: std::collections::BTreeSet<String> = h
            .transitions
            .iter()
            .filter(|t| t.to_state == crate::vocab::breaker::State::Open)
            .map(|t| t.target.id())
            .collect();
        assert!(opened.len() >= incidents, "{opened:?}");
        assert!(h.breakers.iter().all(|b| b.state == crate::vocab::breaker::State::Closed), "{:?}", h.breakers);
        // Rollups hold every probe of every hour.
        let probes: i64 = h.rollups.iter().filter(|r| r.metric == "probes").map(|r| r.count).sum();
        assert_eq!(probes as u64, h.probes);
        // Credit drains to where the live demo key starts.
        let last = h.readings.last().expect("readings");
        assert!((last.remaining_usd - demo_credit(CREDIT_USED_AT_START_USD).1).abs() < 1e-9);
        assert!(h.readings.first().expect("first").remaining_usd > last.remaining_usd);
    }

    #[test]
    fn the_demo_credit_drains_into_demotion_and_a_top_up_ends_it() {
        let now = Utc::now();
        let h = simulate(&config(), now, SEED);
        let points: Vec<(DateTime<Utc>, f64)> = h.readings.iter().map(|r| (r.at, r.remaining_usd)).collect();
        assert!(points.windows(2).any(|w| w[1].1 > w[0].1), "the week shows a top-up");
        // The day the daemon projects from says what the live key will: $2.50 at $0.50 an hour.
        let day: Vec<(DateTime<Utc>, f64)> =
            points.iter().copied().filter(|(at, _)| *at >= now - Duration::hours(24)).collect();
        let six_hours = Some(crate::config::DEFAULT_DEMOTE_WITHIN);
        let o = crate::decide::credit::outlook(&day, six_hours).expect("draining");
        let left = (o.zero_at - now).num_seconds();
        assert!((5 * 3600 - 60..=5 * 3600 + 60).contains(&left), "empty about 5 h from now: {left} s");
        let why = o.demotion(now).expect("within demote_within");
        assert!(why == "credit empty in 5 h" || why == "credit empty in 4.9 h", "{why}");
        // The live key: $2.50 left at start, full again once it gets down to the top-up mark.
        assert_eq!(demo_credit(CREDIT_USED_AT_START_USD), (CREDIT_LIMIT_USD, 2.5));
        let (_, low) = demo_credit(CREDIT_LIMIT_USD - CREDIT_TOP_UP_AT_USD - 0.01);
        assert!((low - CREDIT_TOP_UP_AT_USD - 0.01).abs() < 1e-9, "{low}");
        let (limit, full) = demo_credit(CREDIT_LIMIT_USD - CREDIT_TOP_UP_AT_USD);
        assert_eq!((limit, full), (2.0 * CREDIT_LIMIT_USD - CREDIT_TOP_UP_AT_USD, CREDIT_LIMIT_USD));
        let mut live = day.clone();
        live.push((now + Duration::hours(4), CREDIT_LIMIT_USD));
        live.push((now + Duration::hours(4) + Duration::minutes(1), CREDIT_LIMIT_USD - 0.01));
        let o = crate::decide::credit::outlook(&live, six_hours).expect("burning again");
        assert_eq!(o.demotion(now + Duration::hours(4) + Duration::minutes(1)), None, "a top-up ends the demotion");
    }

    #[test]
    fn latency_follows_the_day() {
        let c = config();
        let now = Utc::now();
        let h = simulate(&c, now, SEED);
        let ttft_at = |hour: u32| {
            let mut v: Vec<f64> = h
                .samples
                .iter()
                .filter(|s| s.started_at.hour() == hour && s.target.provider == "demo-gemini")
                .filter_map(|s| s.ttft_ms)
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (peak, trough) = (ttft_at(PEAK_HOUR_UTC as u32), ttft_at((PEAK_HOUR_UTC as u32 + 12) % 24));
        assert!(peak > trough * 1.4, "peak {peak} trough {trough}");
    }
}
