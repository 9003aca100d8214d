//! The weekly summary (`vigil report --weekly`, and an email on `report.weekly`'s schedule):
//! per provider and region, TTFT P50/P95 this week against last week, error rate, breaker
//! openings, alerts and credit spent, plus a 6-hourly TTFT P50 chart per provider.
//!
//! "This week" is the 7 days ending at `now`, "last week" the 7 days before, so a report run
//! on any day compares like with like and `now` is the only clock (tests inject it).
//! [`build`] reads samples one day at a time and keeps only counts and TTFT values, so a
//! fleet's fortnight of samples is never in memory at once. Percentiles are exact nearest-rank
//! over successful probes, the same selection as `vigil report` ([`crate::decide::report`]).
//! [`chart`] draws the PNGs, [`html`] the document and [`mail`] the message and its delivery.

pub mod chart;
pub mod html;
pub(crate) mod lead_time;
pub mod mail;

use crate::decide::alert::{AlertStatus, Notification};
use crate::decide::report::{nearest_rank, ttft_of};
use crate::io::store::{SampleQuery, Store, StoreError};
use crate::vocab::records::{BalanceReading, BreakerTransition, OutboxItem};
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Length of one compared period, in days.
pub const WEEK_DAYS: i64 = 7;
/// Width of one chart point, in hours.
pub const BUCKET_HOURS: i64 = 6;
/// Chart points per week.
pub const BUCKETS: usize = (WEEK_DAYS * 24 / BUCKET_HOURS) as usize;

/// A half-open time range `[since, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Period {
    /// First instant inside.
    pub since: DateTime<Utc>,
    /// First instant after.
    pub until: DateTime<Utc>,
}

impl Period {
    /// Whether `t` falls inside.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.since <= t && t < self.until
    }
}

/// This week (the 7 days ending at `now`) and last week (the 7 days before).
pub fn weeks(now: DateTime<Utc>) -> (Period, Period) {
    let this = Period { since: now - Duration::days(WEEK_DAYS), until: now };
    let last = Period { since: this.since - Duration::days(WEEK_DAYS), until: this.since };
    (this, last)
}

/// One period's figures for one provider in one region.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WeekFigures {
    /// Probes, every outcome.
    pub samples: u64,
    /// Failed probes.
    pub errors: u64,
    /// errors / samples; `None` without samples.
    pub error_rate: Option<f64>,
    /// Exact nearest-rank median TTFT of successful probes, ms.
    pub ttft_p50_ms: Option<f64>,
    /// Exact nearest-rank 95th percentile TTFT of successful probes, ms.
    pub ttft_p95_ms: Option<f64>,
}

/// One provider in one region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeeklyRow {
    /// Provider name.
    pub provider: String,
    /// Region measured from.
    pub region: String,
    /// Target ids probed this week or last, sorted.
    pub targets: Vec<String>,
    /// The 7 days ending at `now`.
    pub this_week: WeekFigures,
    /// The 7 days before.
    pub last_week: WeekFigures,
    /// Breaker transitions to `open` this week (from closed or from a failed half-open probe).
    pub breaker_openings: u64,
    /// Firing alerts notified this week (first notifications, not reminders or resolves).
    pub alerts: u64,
    /// Sum of the drops between consecutive balance readings this week (top-ups ignored);
    /// `None` with fewer than two readings.
    pub credit_spent_usd: Option<f64>,
}

/// Percent change from `last` to `this`; `None` when either is unknown or `last` is zero.
pub fn change_pct(this: Option<f64>, last: Option<f64>) -> Option<f64> {
    match (this, last) {
        (Some(t), Some(l)) if l > 0.0 => Some((t - l) / l * 100.0),
        _ => None,
    }
}

impl WeeklyRow {
    /// P50 change against last week, percent.
    pub fn ttft_p50_change_pct(&self) -> Option<f64> {
        change_pct(self.this_week.ttft_p50_ms, self.last_week.ttft_p50_ms)
    }

    /// P95 change against last week, percent.
    pub fn ttft_p95_change_pct(&self) -> Option<f64> {
        change_pct(self.this_week.ttft_p95_ms, self.last_week.ttft_p95_ms)
    }
}

/// One target's line on a provider's chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeeklySeries {
    /// Target id.
    pub target: String,
    /// Region measured from.
    pub region: String,
    /// TTFT P50 per 6-hour step of this week, oldest first; `None` where no probe succeeded.
    pub p50_ms: Vec<Option<f64>>,
}

impl WeeklySeries {
    /// Legend text: `openai/gpt-4o-mini (eu-west-1)`.
    pub fn label(&self) -> String {
        format!("{} ({})", self.target, self.region)
    }
}

/// A provider's chart: one line per target and region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chart {
    /// Provider name.
    pub provider: String,
    /// Lines, by target id then region.
    pub series: Vec<WeeklySeries>,
}

/// The whole summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeeklyReport {
    /// Region reported on; `None` for every region in the store.
    pub region: Option<String>,
    /// The `now` it was built for.
    pub generated_at: DateTime<Utc>,
    /// The 7 days ending at `generated_at`.
    pub this_week: Period,
    /// The 7 days before.
    pub last_week: Period,
    /// By provider, then region.
    pub rows: Vec<WeeklyRow>,
    /// One per provider with a successful probe this week.
    pub charts: Vec<Chart>,
    /// Firing alerts about no single provider (`region_unhealthy`, `probe_budget_exceeded`), per region.
    pub instance_alerts: BTreeMap<String, u64>,
    /// Providers' own status page incidents this week, and how many vigil saw first ([`lead_time`]).
    pub provider_incidents: Vec<lead_time::ProviderLead>,
    /// Time each target spent as its chain's head this week, and the spend it implied at the
    /// chain's `tokens_per_day` ([`crate::decide::chain_cost`]).
    pub chain_heads: Vec<crate::decide::chain_cost::HeadTime>,
}

impl WeeklyReport {
    /// `eu-west-1` or `all regions`.
    pub fn scope(&self) -> &str {
        self.region.as_deref().unwrap_or("all regions")
    }

    /// Email subject / document title.
    pub fn title(&self) -> String {
        format!(
            "vigil weekly summary: {}, {} to {}",
            self.scope(),
            self.this_week.since.format("%Y-%m-%d"),
            self.this_week.until.format("%Y-%m-%d")
        )
    }
}

#[derive(Default)]
struct Week {
    samples: u64,
    errors: u64,
    ttft: Vec<f64>,
}

impl Week {
    fn add(&mut self, s: &Sample) {
        self.samples += 1;
        if s.outcome.is_failure() {
            self.errors += 1;
        }
        self.ttft.extend(ttft_of(s));
    }

    fn merge(&mut self, other: &Week) {
        self.samples += other.samples;
        self.errors += other.errors;
        self.ttft.extend_from_slice(&other.ttft);
    }

    fn figures(mut self) -> WeekFigures {
        self.ttft.sort_by(f64::total_cmp);
        WeekFigures {
            samples: self.samples,
            errors: self.errors,
            error_rate: (self.samples > 0).then(|| self.errors as f64 / self.samples as f64),
            ttft_p50_ms: nearest_rank(&self.ttft, 0.5),
            ttft_p95_ms: nearest_rank(&self.ttft, 0.95),
        }
    }
}

struct TargetAcc {
    this: Week,
    last: Week,
    buckets: Vec<Vec<f64>>,
}

impl Default for TargetAcc {
    fn default() -> Self {
        TargetAcc { this: Week::default(), last: Week::default(), buckets: vec![Vec::new(); BUCKETS] }
    }
}

/// Folds samples into per-target counts and TTFT values; [`Collector::finish`] makes the report.
pub struct Collector {
    this: Period,
    last: Period,
    targets: BTreeMap<Target, TargetAcc>,
}

impl Collector {
    /// An empty collector for the weeks ending at `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        let (this, last) = weeks(now);
        Collector { this, last, targets: BTreeMap::new() }
    }

    /// Adds one sample (ignored outside both weeks).
    pub fn add(&mut self, s: &Sample) {
        let at = s.started_at;
        if self.this.contains(at) {
            let acc = self.targets.entry(s.target.clone()).or_default();
            acc.this.add(s);
            if let Some(v) = ttft_of(s) {
                let i = (at - self.this.since).num_seconds() / (BUCKET_HOURS * 3600);
                let i = usize::try_from(i).unwrap_or(0).min(BUCKETS - 1);
                acc.buckets[i].push(v);
            }
        } else if self.last.contains(at) {
            self.targets.entry(s.target.clone()).or_default().last.add(s);
        }
    }

    /// Providers seen in the samples.
    pub fn providers(&self) -> BTreeSet<String> {
        self.targets.keys().map(|t| t.provider.to_string()).collect()
    }

    /// The report, given this week's breaker transitions, outbox items and balance readings
    /// (anything outside this week, or outside `region` when given, is ignored).
    pub fn finish(
        self,
        region: Option<&str>,
        transitions: &[BreakerTransition],
        outbox: &[OutboxItem],
        balances: &[BalanceReading],
    ) -> WeeklyReport {
        let in_scope = |r: &str| region.is_none_or(|want| want == r);
        let this = self.this;
        let mut groups: BTreeMap<(String, String), (Vec<String>, Week, Week)> = BTreeMap::new();
        let mut charts: BTreeMap<String, Vec<WeeklySeries>> = BTreeMap::new();
        for (t, mut acc) in self.targets.into_iter().filter(|(t, _)| in_scope(&t.region)) {
            let g = groups.entry((t.provider.to_string(), t.region.to_string())).or_default();
            g.0.push(t.id());
            g.1.merge(&acc.this);
            g.2.merge(&acc.last);
            let p50_ms: Vec<Option<f64>> = acc
                .buckets
                .iter_mut()
                .map(|b| {
                    b.sort_by(f64::total_cmp);
                    nearest_rank(b, 0.5)
                })
                .collect();
            if p50_ms.iter().any(Option::is_some) {
                charts.entry(t.provider.to_string()).or_default().push(WeeklySeries {
                    target: t.id(),
                    region: t.region.to_string(),
                    p50_ms,
                });
            }
        }

        let mut openings: BTreeMap<(String, String), u64> = BTreeMap::new();
        for t in transitions.iter().filter(|t| {
            t.to_state == crate::vocab::breaker::State::Open && this.contains(t.at) && in_scope(&t.target.region)
        }) {
            *openings.entry((t.target.provider.to_string(), t.target.region.to_string())).or_default() += 1;
        }

        let (alerts, instance_alerts) = count_alerts(outbox, this, &in_scope);
        let credit = credit_spent(balances, this, &in_scope);

        let keys: BTreeSet<(String, String)> =
            groups.keys().chain(openings.keys()).chain(alerts.keys()).cloned().collect();
        let rows = keys
            .into_iter()
            .map(|key| {
                let (mut targets, this_week, last_week) = groups.remove(&key).unwrap_or_default();
                targets.sort();
                targets.dedup();
                WeeklyRow {
                    breaker_openings: openings.get(&key).copied().unwrap_or(0),
                    alerts: alerts.get(&key).copied().unwrap_or(0),
                    credit_spent_usd: credit.get(&key).copied(),
                    provider: key.0,
                    region: key.1,
                    targets,
                    this_week: this_week.figures(),
                    last_week: last_week.figures(),
                }
            })
            .collect();
        let charts = charts
            .into_iter()
            .map(|(provider, mut series)| {
                series.sort_by(|a, b| (&a.target, &a.region).cmp(&(&b.target, &b.region)));
                Chart { provider, series }
            })
            .collect();
        WeeklyReport {
            region: region.map(str::to_string),
            generated_at: this.until,
            this_week: this,
            last_week: self.last,
            rows,
            charts,
            instance_alerts,
            provider_incidents: Vec::new(),
            chain_heads: Vec::new(),
        }
    }
}

type Counts = BTreeMap<(String, String), u64>;

/// Firing alerts per (provider, region), and per region for instance-wide ones. An outbox item
/// exists per channel, so notifications are counted once by their key.
fn count_alerts(
    outbox: &[OutboxItem],
    this: Period,
    in_scope: &dyn Fn(&str) -> bool,
) -> (Counts, BTreeMap<String, u64>) {
    let mut seen = HashSet::new();
    let mut per_provider = Counts::new();
    let mut instance = BTreeMap::new();
    for item in outbox.iter().filter(|i| this.contains(i.created_at) && in_scope(&i.region)) {
        let n: Notification = match serde_json::from_value(item.payload.clone()) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(id = %item.id, error = %e, "outbox item is not an alert notification; not counted");
                continue;
            }
        };
        if n.test || n.reminder || n.status != AlertStatus::Firing || !seen.insert(n.key.clone()) {
            continue;
        }
        // Head moves are notices with their own section (time per chain head), not alerts.
        let alerts = n.alerts.iter().filter(|a| a.kind != crate::decide::alert::AlertKind::ChainHeadChanged);
        for a in alerts.filter(|a| a.status == AlertStatus::Firing) {
            if a.provider.is_empty() {
                *instance.entry(item.region.clone()).or_default() += 1;
            } else {
                *per_provider.entry((a.provider.clone(), item.region.clone())).or_default() += 1;
            }
        }
    }
    (per_provider, instance)
}

/// Per (provider, region): the sum of drops between consecutive readings inside `this`.
fn credit_spent(
    balances: &[BalanceReading],
    this: Period,
    in_scope: &dyn Fn(&str) -> bool,
) -> BTreeMap<(String, String), f64> {
    let mut readings: BTreeMap<(String, String), Vec<&BalanceReading>> = BTreeMap::new();
    for r in balances.iter().filter(|r| this.contains(r.at) && in_scope(&r.region)) {
        readings.entry((r.provider.clone(), r.region.clone())).or_default().push(r);
    }
    readings
        .into_iter()
        .filter(|(_, rs)| rs.len() >= 2)
        .map(|(key, mut rs)| {
            rs.sort_by_key(|r| r.at);
            let spent = rs.windows(2).map(|w| (w[0].remaining_usd - w[1].remaining_usd).max(0.0)).sum();
            (key, spent)
        })
        .collect()
}

/// Builds the report for `region` (`None`: every region) for the weeks ending at `now`, with
/// no chain traffic configured (time per chain head, no implied spend).
pub async fn build(store: &dyn Store, region: Option<&str>, now: DateTime<Utc>) -> Result<WeeklyReport, StoreError> {
    build_for(store, region, now, &crate::decide::chain_cost::Traffic::new()).await
}

/// [`build`] with each chain's `tokens_per_day` (`traffic`), so the time per chain head says
/// the spend it implied.
pub async fn build_for(
    store: &dyn Store,
    region: Option<&str>,
    now: DateTime<Utc>,
    traffic: &crate::decide::chain_cost::Traffic,
) -> Result<WeeklyReport, StoreError> {
    let mut c = Collector::new(now);
    let (this, last) = (c.this, c.last);
    let mut from = last.since;
    while from < this.until {
        let to = (from + Duration::days(1)).min(this.until);
        let q = SampleQuery {
            region: region.map(str::to_string),
            since: Some(from),
            until: Some(to),
            ..SampleQuery::default()
        };
        for s in store.samples(&q).await? {
            c.add(&s);
        }
        from = to;
    }
    let transitions = store.transitions_between(region, this.since, this.until).await?;
    let outbox = store.outbox_between(region, this.since, this.until).await?;
    let mut balances = Vec::new();
    for provider in c.providers() {
        balances.extend(store.balances(&provider, this.since).await?);
    }
    let mut report = c.finish(region, &transitions, &outbox, &balances);
    // Any region's breaker may be first to see a provider's incident; the page is shared by all.
    let incidents = store.provider_incidents_between(None, this.since, this.until).await?;
    if !incidents.is_empty() {
        let all = match region {
            None => transitions,
            Some(_) => store.transitions_between(None, this.since - lead_time::LOOKBACK, this.until).await?,
        };
        report.provider_incidents = lead_time::lead_times(&incidents, &all);
    }
    let heads = store.chain_heads_between(region, this.since, this.until).await?;
    report.chain_heads = crate::decide::chain_cost::time_per_head(&heads, this.since, this.until, traffic);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Outcome;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc)
    }

    fn sample(provider: &str, model: &str, region: &str, t: DateTime<Utc>, ttft: f64, outcome: Outcome) -> Sample {
        let target = Target::new(provider.into(), model.into(), None, region.into());
        let mut s = Sample::new(target, t, t);
        s.ttft_ms = Some(ttft);
        s.outcome = outcome;
        s
    }

    #[test]
    fn weeks_are_the_seven_days_ending_now_and_the_seven_before() {
        let (this, last) = weeks(at("2026-11-30T09:00:00Z"));
        assert_eq!((this.since, this.until), (at("2026-11-23T09:00:00Z"), at("2026-11-30T09:00:00Z")));
        assert_eq!((last.since, last.until), (at("2026-11-16T09:00:00Z"), at("2026-11-23T09:00:00Z")));
        assert!(this.contains(this.since) && !this.contains(this.until));
    }

    #[test]
    fn a_provider_pools_its_targets_and_failures_count_only_in_the_error_rate() {
        let now = at("2026-11-30T09:00:00Z");
        let mut c = Collector::new(now);
        let t = at("2026-11-29T00:00:00Z");
        for v in [100.0, 200.0, 300.0] {
            c.add(&sample("openai", "a", "eu", t, v, Outcome::Ok));
        }
        c.add(&sample("openai", "b", "eu", t, 400.0, Outcome::Ok));
        c.add(&sample("openai", "b", "eu", t, 9_999.0, Outcome::ServerError));
        c.add(&sample("openai", "a", "eu", at("2026-11-20T00:00:00Z"), 250.0, Outcome::Ok));
        c.add(&sample("openai", "a", "eu", at("2026-11-01T00:00:00Z"), 1.0, Outcome::Ok));
        let r = c.finish(None, &[], &[], &[]);
        assert_eq!(r.rows.len(), 1);
        let row = &r.rows[0];
        assert_eq!(row.targets, ["openai/a", "openai/b"]);
        assert_eq!((row.this_week.samples, row.this_week.errors), (5, 1));
        assert_eq!(row.this_week.error_rate, Some(0.2));
        assert_eq!((row.this_week.ttft_p50_ms, row.this_week.ttft_p95_ms), (Some(200.0), Some(400.0)));
        assert_eq!((row.last_week.samples, row.last_week.ttft_p50_ms), (1, Some(250.0)), "a month ago is in neither");
        assert_eq!(row.ttft_p50_change_pct(), Some(-20.0));
        assert_eq!(change_pct(Some(1.0), Some(0.0)), None);
    }

    #[test]
    fn chart_points_are_six_hour_medians_with_gaps_where_nothing_succeeded() {
        let now = at("2026-11-30T00:00:00Z");
        let mut c = Collector::new(now);
        c.add(&sample("groq", "m", "eu", at("2026-11-23T00:00:00Z"), 10.0, Outcome::Ok));
        c.add(&sample("groq", "m", "eu", at("2026-11-23T05:59:59Z"), 30.0, Outcome::Ok));
        c.add(&sample("groq", "m", "eu", at("2026-11-23T03:00:00Z"), 20.0, Outcome::Ok));
        c.add(&sample("groq", "m", "eu", at("2026-11-29T23:59:59Z"), 70.0, Outcome::Ok));
        c.add(&sample("groq", "m", "eu", at("2026-11-24T00:00:00Z"), 5.0, Outcome::Timeout));
        let r = c.finish(None, &[], &[], &[]);
        let points = &r.charts[0].series[0].p50_ms;
        assert_eq!(points.len(), BUCKETS);
        assert_eq!((points[0], points[1], points[4], points[BUCKETS - 1]), (Some(20.0), None, None, Some(70.0)));
    }

    #[test]
    fn credit_spent_sums_drops_and_ignores_top_ups() {
        let now = at("2026-11-30T00:00:00Z");
        let reading = |t: &str, usd, region: &str| BalanceReading {
            provider: "openrouter".into(),
            region: region.into(),
            at: at(t),
            remaining_usd: usd,
        };
        let readings = [
            reading("2026-11-24T00:00:00Z", 50.0, "eu"),
            reading("2026-11-26T00:00:00Z", 10.0, "eu"),
            reading("2026-11-25T00:00:00Z", 45.0, "eu"),
            reading("2026-11-27T00:00:00Z", 100.0, "eu"),
            reading("2026-11-28T00:00:00Z", 97.5, "eu"),
            reading("2026-11-10T00:00:00Z", 500.0, "eu"),
            reading("2026-11-28T00:00:00Z", 1.0, "us"),
        ];
        let spent = credit_spent(&readings, weeks(now).0, &|_| true);
        assert_eq!(spent.get(&("openrouter".into(), "eu".into())), Some(&42.5), "5 + 35 + 2.5, the top-up ignored");
        assert_eq!(spent.get(&("openrouter".into(), "us".into())), None, "one reading says nothing");
    }
}
