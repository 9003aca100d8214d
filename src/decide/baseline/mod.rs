//! Rolling baselines: hourly HdrHistogram rollups per target × metric, merged over the window.
//!
//! Values are bucketed as an `hdrhistogram::Histogram<u64>` with bounds 1 µs..10 min buckets them,
//! but held sparsely (bucket index → count): a dense histogram of that range is 172 KB, and a week
//! of hourly ones per target would not fit in memory. Hours (and their persisted rollups,
//! hdrhistogram V2 bytes) keep 3 significant digits; the fold of the window and every published
//! percentile keep 2 (buckets 0.4–0.8 % of their value wide): at 10,000 targets on a week the
//! baselines hold 38 MB instead of 67 (30 MB since each series is boxed with its held hours
//! inline), and every percentile stays within 1 % of the exact one.
//! Each series holds its recent hours one by one plus one merged histogram of the rest of the
//! window; a refresh folds in an hour once it is stored, and the hour leaving the window is read
//! back from storage and subtracted, so nothing rescans raw samples or re-merges the window and
//! memory does not grow with its length.
//!
//! Files: [`codec`] (sparse histograms and their V2 bytes), [`window`] (an hour window of one
//! series), [`failover`] (the metrics and the failover predicate), [`guard`] (samples taken in
//! trouble held out, and a lasting shift adopted); this file holds the [`Baselines`] API over them.

mod codec;
mod failover;
mod guard;
mod window;

pub use codec::{rollup_quantile, HIGHEST, LOWEST, SIGFIG};
pub use failover::{exceeds_failover, failover_threshold, worst_excess, Excess, LatencyP95, Metric};
pub use guard::{Adoption, Level, ADOPTED_SHARE_PERCENT};

use crate::config::BaselineConfig;
use crate::vocab::records::Rollup;
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::{ByTarget, Name, Target};
use chrono::{DateTime, Utc};
use codec::{decode_v2, encode_v2, index_for, quantiles, sparse_total, to_recorded, Sparse, BASELINE, SCALE};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use window::{hour_of, hour_start, min_opt, Counts, Held, Hist, Series, Tally, HOLD};

/// Baseline failures: only persisted rollups can be malformed.
#[derive(Debug, Error)]
pub enum BaselineError {
    /// The rollup names a metric this version does not know.
    #[error("rollup {target} {hour}: unknown metric {metric:?}")]
    UnknownMetric {
        /// Target id.
        target: String,
        /// Hour of the rollup.
        hour: DateTime<Utc>,
        /// The metric name found.
        metric: String,
    },
    /// The histogram bytes are not a readable V2 histogram.
    #[error("rollup {target} {metric} {hour}: bad histogram: {message}")]
    Decode {
        /// Target id.
        target: String,
        /// Metric name.
        metric: String,
        /// Hour of the rollup.
        hour: DateTime<Utc>,
        /// What was wrong.
        message: String,
    },
}

/// Percentiles of one metric of one target over the window; a quantile is `None` below its minimum count.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Baseline {
    /// Values in the window (always reported).
    pub count: u64,
    /// Median, in ms (tok/s for `tokens_per_s`).
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// Outcome of [`Baselines::load`]: rollups taken and rollups skipped as unreadable.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Rollups loaded.
    pub loaded: usize,
    /// Unreadable rollups, with why (they are skipped so one bad row cannot block a start).
    pub skipped: Vec<BaselineError>,
}

/// Which held hours a persist takes ([`Baselines::dirty_rollups_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hours {
    /// Every changed hour, the one under way too (a stop, a whole hand-off).
    All,
    /// Only changed hours that ended by this instant: the hour under way changes with every
    /// probe and is written on its own, slower cadence (`run::pipeline`).
    EndedBy(DateTime<Utc>),
}

/// Rollup metric name of an hour's probe count (stored without a histogram).
pub const PROBES: &str = "probes";
/// Rollup metric name of an hour's failed-probe count (stored without a histogram).
pub const ERRORS: &str = "errors";

/// Rolling P50/P95/P99 of `ttfb`, `ttft` and `tokens_per_s`, and probe/error counts, per target
/// (region included) over the window.
///
/// Memory is one folded histogram per series plus the held hours, not a histogram per hour of the
/// window: at an hour boundary the hour leaving the window is read back from storage and
/// subtracted ([`expiring`](Self::expiring), [`expire`](Self::expire)). Until that read succeeds
/// (storage down) the window simply reaches further back.
#[derive(Debug)]
pub struct Baselines {
    window_hours: i64,
    min: [u64; 3],
    /// Boxed: a map slot is then a pointer, and the table's spare slots (up to half of them
    /// after a growth) hold no series' worth of bytes.
    series: ByTarget<Box<Series>>,
    /// Hours at or after this stay held; it only moves forward.
    hold_from: i64,
    /// Oldest hour that may be in a fold; `None` while nothing is folded.
    folded_from: Option<i64>,
    /// Samples too late for their hour (already folded), left out of the baselines.
    late: u64,
    /// `baseline.adopt_after`: how long a shift is held before it is adopted (`None`: only on request).
    adopt_after: Option<chrono::Duration>,
    /// What each target in trouble measured, held out of its baseline.
    shifts: ByTarget<guard::Shift>,
}

impl Baselines {
    /// Empty baselines following `[baseline]`.
    pub fn new(config: &BaselineConfig) -> Self {
        let window_hours = (config.window.as_secs().div_ceil(3600)).max(1) as i64;
        Baselines {
            window_hours,
            min: [config.min_samples_p50, config.min_samples_p95, config.min_samples_p99],
            series: ByTarget::default(),
            hold_from: i64::MIN,
            folded_from: None,
            late: 0,
            adopt_after: config.adopt_after.and_then(|d| chrono::Duration::from_std(d).ok()),
            shifts: ByTarget::default(),
        }
    }

    /// Start of the oldest hour in the window ending at `now`: load rollups from here.
    pub fn window_start(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        hour_start(self.oldest(now))
    }

    fn oldest(&self, now: DateTime<Utc>) -> i64 {
        hour_of(now) - self.window_hours + 1
    }

    /// Moves `hold_from` to `now` and returns (hold_from, oldest hour of the window).
    fn bounds(&mut self, now: DateTime<Utc>) -> (i64, i64) {
        self.hold_from = self.hold_from.max(hour_of(now) - HOLD);
        (self.hold_from, self.oldest(now))
    }

    /// Samples left out because their hour was already folded (they stay in storage; `--rebuild` counts them).
    #[cfg(any(test, feature = "test-support"))]
    pub fn late_samples(&self) -> u64 {
        self.late
    }

    /// Counts a sample and adds its `ttfb`, `ttft` and `tokens_per_s` to its hour (histograms take `ok` samples only).
    pub fn record(&mut self, sample: &Sample) {
        self.record_weighted(sample, 1);
    }

    /// As [`Baselines::record`], with the sample's values counted `weight` times in the
    /// histograms (adaptive probing: a sample of a target probed every three base intervals
    /// stands for three; 0 keeps it out of the percentiles). Probe and error counts stay real.
    pub fn record_weighted(&mut self, sample: &Sample, weight: u32) {
        let hour = hour_of(sample.started_at);
        let create = hour >= self.hold_from;
        let series = match self.series.get_mut(&sample.target) {
            Some(s) => s,
            None => self.series.entry(sample.target.clone()).or_default(),
        };
        let Some(h) = series.counts.held_mut(hour, create) else {
            self.late += 1;
            tracing::debug!(target = %sample.target, started_at = %sample.started_at, "sample too late for its hour's baseline");
            return;
        };
        h.tally.probes += 1;
        h.tally.errors += i64::from(sample.outcome.is_failure());
        h.version = h.version.wrapping_add(1);
        if sample.outcome != Outcome::Ok || weight == 0 {
            return;
        }
        for metric in Metric::ALL {
            let Some(index) = metric.value(sample).and_then(to_recorded).map(index_for) else { continue };
            let slot = metric.slot();
            // Never re-open a folded hour: its stored rollup would be overwritten by the newcomer alone.
            if let Some(h) = series.metrics[slot].held_mut(hour, create) {
                h.tally.packed.merge(&[(index, weight)], false);
                h.tally.count += u64::from(weight);
                h.version = h.version.wrapping_add(1);
                series.invalidate(slot);
            }
        }
    }

    /// Records a sample as the guard allows ([`guard`]): while the target is `in_trouble` (breaker
    /// open or half-open, or an open latency or error incident) its probe and error counts stay
    /// real but its values are held beside the baseline instead of joining it; the first sample
    /// out of trouble drops what was held (the level came back). A shift held for
    /// `baseline.adopt_after` is adopted and returned.
    pub fn record_guarded(&mut self, sample: &Sample, weight: u32, in_trouble: bool) -> Option<Adoption> {
        if !in_trouble {
            if let Some(shift) = self.shifts.remove(&sample.target) {
                tracing::debug!(target = %sample.target, held = shift.samples, since = %shift.since,
                    "trouble over; held samples dropped");
            }
            self.record_weighted(sample, weight);
            return None;
        }
        self.record_weighted(sample, 0);
        let shift = match self.shifts.get_mut(&sample.target) {
            Some(s) => s,
            None => self.shifts.entry(sample.target.clone()).or_insert_with(|| guard::Shift::new(sample.started_at)),
        };
        shift.hold(sample, weight);
        let due = self.adopt_after.is_some_and(|after| sample.started_at - shift.since >= after);
        if due {
            self.adopt(&sample.target, sample.started_at, false)
        } else {
            None
        }
    }

    /// When a target's current shift began, if it is held.
    pub fn held_since(&self, target: &Target) -> Option<DateTime<Utc>> {
        self.shifts.get(target).map(|s| s.since)
    }

    /// Takes what a target has held into its baseline now, counted so it is
    /// [`ADOPTED_SHARE_PERCENT`] of the window's values (its P50 and P95 describe the new level);
    /// `None` when nothing with values is held. The values join the hour of `now`.
    pub fn adopt(&mut self, target: &Target, now: DateTime<Utc>, by_request: bool) -> Option<Adoption> {
        let shift = self.shifts.get(target)?;
        let metric = if shift.count(Metric::Ttft) > 0 { Metric::Ttft } else { Metric::Ttfb };
        let held = shift.count(metric);
        if held == 0 {
            return None;
        }
        let before = self.get(target, metric, now);
        let shift = self.shifts.remove(target)?;
        let weight = guard::adopted_weight(before.count, held);
        let hour = hour_of(now);
        let create = hour >= self.hold_from;
        let series = self.series.entry(target.clone()).or_default();
        for m in Metric::ALL {
            let slot = m.slot();
            let values = guard::weighted(&shift.held[slot], weight);
            if values.is_empty() {
                continue;
            }
            if let Some(h) = series.metrics[slot].held_mut(hour, create) {
                h.tally.packed.merge(&values, false);
                h.tally.count += sparse_total(&values);
                h.version = h.version.wrapping_add(1);
                series.invalidate(slot);
            }
        }
        Some(Adoption {
            target: target.clone(),
            since: shift.since,
            at: now,
            metric,
            before: Level { p50: before.p50, p95: before.p95 },
            after: shift.level(metric),
            samples: held,
            weight,
            by_request,
        })
    }

    /// Moves every series' window to `now` and recomputes what changed; returns series recomputed.
    pub fn refresh(&mut self, now: DateTime<Utc>) -> usize {
        self.fold(now);
        let mut recomputed = 0;
        for series in self.series.values_mut() {
            for slot in 0..3 {
                if series.cached[slot].is_none() {
                    series.cached[slot] = Some(series.compute(slot, self.min));
                    recomputed += 1;
                }
            }
        }
        recomputed
    }

    /// Moves every window to `now` without recomputing percentiles.
    fn fold(&mut self, now: DateTime<Utc>) {
        let (hold_from, oldest) = self.bounds(now);
        let mut first = None;
        for series in self.series.values_mut() {
            first = min_opt(first, series.advance(hold_from, oldest));
        }
        self.folded_from = min_opt(self.folded_from, first);
        self.series.retain(|_, s| !s.is_empty());
    }

    /// Hours folded into the baselines that have left the window ending at `now`: read their
    /// rollups back (`[from, until)`) and pass them to [`expire`](Self::expire).
    pub fn expiring(&self, now: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let oldest = self.oldest(now);
        self.folded_from.filter(|from| *from < oldest).map(|from| (hour_start(from), hour_start(oldest)))
    }

    /// Subtracts the stored rollups of hours before `until` (from [`expiring`](Self::expiring)) from the folds.
    pub fn expire(&mut self, rollups: &[Rollup], until: DateTime<Utc>) -> LoadReport {
        let until_hour = hour_of(until);
        let from = self.folded_from.unwrap_or(i64::MIN);
        let mut report = LoadReport::default();
        for r in rollups.iter().filter(|r| (from..until_hour).contains(&hour_of(r.hour))) {
            let Some(series) = self.series.get_mut(&r.target) else { continue };
            let hour = hour_of(r.hour);
            // An hour still held was never folded (its store copy may be partial): dropping it is enough.
            match decode(r, &mut report) {
                Some(Decoded::Counts(c)) if !series.counts.holds(hour) => series.counts.folded.fold_out(&c),
                Some(Decoded::Hist(slot, entries, count)) if !series.metrics[slot].holds(hour) => {
                    series.metrics[slot].folded.fold_entries(entries, count, true);
                    series.invalidate(slot);
                }
                _ => continue,
            }
            report.loaded += 1;
        }
        for series in self.series.values_mut() {
            series.advance(i64::MIN, until_hour);
        }
        self.folded_from = Some(until_hour);
        report
    }

    /// The baseline of one target's metric over the window ending at `now` (zero count when unknown).
    pub fn get(&mut self, target: &Target, metric: Metric, now: DateTime<Utc>) -> Baseline {
        let (hold_from, oldest) = self.bounds(now);
        let Some(series) = self.series.get_mut(target) else {
            return Baseline::default();
        };
        let folded = series.advance(hold_from, oldest);
        self.folded_from = min_opt(self.folded_from, folded);
        let slot = metric.slot();
        if let Some(b) = series.cached[slot] {
            return b;
        }
        let b = series.compute(slot, self.min);
        series.cached[slot] = Some(b);
        b
    }

    /// The nearest-rank quantile `q` of one target's metric over the window ending at `now`, whatever
    /// the count (`None` without values). For provisional bounds only: the published percentiles of
    /// [`get`](Self::get) keep their minimum counts.
    pub fn quantile_any(&mut self, target: &Target, metric: Metric, q: f64, now: DateTime<Utc>) -> Option<f64> {
        let (hold_from, oldest) = self.bounds(now);
        let series = self.series.get_mut(target)?;
        let folded = series.advance(hold_from, oldest);
        self.folded_from = min_opt(self.folded_from, folded);
        let slot = metric.slot();
        if let Some((bits, v)) = series.any[slot] {
            if bits == q.to_bits() {
                return v;
            }
        }
        let w = &series.metrics[slot];
        let count = w.total(|h| h.count);
        let v = if count == 0 || !(0.0..=1.0).contains(&q) {
            None
        } else {
            Some(w.quantiles(count, [q, q, q])[0] as f64 / SCALE)
        };
        series.any[slot] = Some((q.to_bits(), v));
        v
    }

    /// Probes and failed probes of a target in the window (as of the last refresh).
    pub fn window_counts(&self, target: &Target) -> (i64, i64) {
        self.series.get(target).map_or((0, 0), |s| {
            let c = &s.counts;
            let sum = |f: fn(&Counts) -> i64| f(&c.folded) + c.held.iter().map(|h| f(&h.tally)).sum::<i64>();
            (sum(|c| c.probes), sum(|c| c.errors))
        })
    }

    /// Baselines as of the last [`refresh`](Self::refresh), for read-only snapshots (HTTP, metrics, export).
    pub fn snapshot(&self) -> Vec<(Target, Metric, Baseline)> {
        let mut out: Vec<_> = self
            .series
            .iter()
            .filter(|(_, s)| s.metrics.iter().any(|w| !w.is_empty()))
            .flat_map(|(t, s)| Metric::ALL.map(|m| (t.clone(), m, s.cached[m.slot()].unwrap_or_default())))
            .collect();
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }

    /// Targets with data.
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.series.keys()
    }

    /// Held hours changed since the last [`mark_persisted`](Self::mark_persisted), as rollups
    /// (histograms V2-serialized; counts as `probes`/`errors` rows without a histogram).
    pub fn dirty_rollups(&self) -> Vec<Rollup> {
        self.dirty_rollups_of(|_| true, Hours::All)
    }

    /// [`dirty_rollups`](Self::dirty_rollups) of the targets `keep` takes, of the `hours` asked for.
    pub fn dirty_rollups_of(&self, keep: impl Fn(&Target) -> bool, hours: Hours) -> Vec<Rollup> {
        let before = match hours {
            Hours::All => i64::MAX,
            Hours::EndedBy(now) => hour_of(now),
        };
        let mut out = Vec::new();
        let rollup = |target: &Target, metric: &Name, hour: i64, count: i64, histogram: Vec<u8>| Rollup {
            target: target.clone(),
            metric: metric.clone(),
            hour: hour_start(hour),
            count,
            histogram,
        };
        let names = Metric::ALL.map(|m| Name::from(m.as_str()));
        let (probes, errors) = (Name::from(PROBES), Name::from(ERRORS));
        for (target, series) in self.series.iter().filter(|(t, _)| keep(t)) {
            for (metric, name) in Metric::ALL.iter().zip(&names) {
                for h in series.metrics[metric.slot()].held.iter().filter(|h| !h.is_stored() && h.hour < before) {
                    let bytes = encode_v2(&h.tally.packed.unpack());
                    let count = i64::try_from(h.tally.count).unwrap_or(i64::MAX);
                    out.push(rollup(target, name, h.hour, count, bytes));
                }
            }
            for h in series.counts.held.iter().filter(|h| !h.is_stored() && h.hour < before) {
                out.push(rollup(target, &probes, h.hour, h.tally.probes, Vec::new()));
                out.push(rollup(target, &errors, h.hour, h.tally.errors, Vec::new()));
            }
        }
        out
    }

    /// Marks rollups as stored; an hour that changed since they were taken stays dirty.
    pub fn mark_persisted(&mut self, rollups: &[Rollup]) {
        for r in rollups {
            let Some(series) = self.series.get_mut(&r.target) else { continue };
            let hour = hour_of(r.hour);
            let matches_hist = |h: &Held<Hist>| i64::try_from(h.tally.count).ok() == Some(r.count);
            match r.metric.as_str() {
                PROBES => {
                    if let Some(h) = series.counts.held_mut(hour, false) {
                        if h.tally.probes == r.count {
                            h.persisted = h.version;
                        }
                    }
                }
                ERRORS => {}
                name => {
                    let Ok(metric) = name.parse::<Metric>() else { continue };
                    if let Some(h) = series.metrics[metric.slot()].held_mut(hour, false) {
                        if matches_hist(h) {
                            h.persisted = h.version;
                        }
                    }
                }
            }
        }
    }

    /// Loads stored rollups of the window ending at `now` (see [`Window::load`](window::Window::load)); unreadable ones
    /// are skipped and reported. Loading the same hour twice counts it twice: load once per start.
    pub fn load(&mut self, rollups: &[Rollup], now: DateTime<Utc>) -> LoadReport {
        let (hold_from, oldest) = self.bounds(now);
        let mut report = LoadReport::default();
        let mut first = None;
        for r in rollups {
            let hour = hour_of(r.hour);
            if hour < oldest {
                continue;
            }
            let Some(decoded) = decode(r, &mut report) else { continue };
            let series = match self.series.get_mut(&r.target) {
                Some(s) => s,
                None => self.series.entry(r.target.clone()).or_default(),
            };
            match decoded {
                Decoded::Counts(c) => series.counts.load(hour, &c, hold_from),
                Decoded::Hist(slot, entries, count) => {
                    series.metrics[slot].load_entries(hour, entries, count, hold_from);
                    series.invalidate(slot);
                }
            }
            if hour < hold_from {
                first = min_opt(first, Some(hour));
            }
            report.loaded += 1;
        }
        self.folded_from = min_opt(self.folded_from, first);
        report
    }

    /// The hours a start loads: `[first hour of the window, end of the current hour)`.
    pub fn window_hours(&self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        (hour_start(self.oldest(now)), hour_start(hour_of(now) + 1))
    }

    /// Loads one hour of stored rollups (of [`window_hours`](Self::window_hours), oldest first)
    /// and folds what left the held hours, so a load read an hour at a time stays small.
    pub fn load_hour(&mut self, rollups: &[Rollup], now: DateTime<Utc>) -> LoadReport {
        let report = self.load(rollups, now);
        self.fold(now);
        report
    }

    /// Forgets everything and rebuilds from raw samples (`vigil baselines --rebuild`); every hour
    /// becomes dirty and stays held until persisted.
    pub fn rebuild_from_samples(&mut self, samples: &[Sample]) {
        self.series.clear();
        self.folded_from = None;
        self.hold_from = i64::MIN;
        for s in samples {
            self.record(s);
        }
    }
}

/// The baseline of a small set of raw values (ms) with the minimum counts `min` (P50, P95, P99),
/// bucketed and ranked exactly as every baseline here is: for side series kept as raw values
/// (the long-prompt probes' TTFT per target and size, `decide::workload`).
pub fn baseline_of(values: impl IntoIterator<Item = f64>, min: [u64; 3]) -> Baseline {
    let sparse = sparse_of(values);
    let count = sparse_total(&sparse);
    if count == 0 {
        return Baseline::default();
    }
    let q = quantiles(BASELINE, std::iter::empty(), &sparse, count, [0.5, 0.95, 0.99]);
    let publish = |k: usize| (count >= min[k]).then(|| q[k] as f64 / SCALE);
    Baseline { count, p50: publish(0), p95: publish(1), p99: publish(2) }
}

/// The nearest-rank quantile `q` of raw values (ms), as [`baseline_of`] buckets them, whatever
/// their count (`None` without values): for provisional bounds.
pub fn quantile_of(values: impl IntoIterator<Item = f64>, q: f64) -> Option<f64> {
    let sparse = sparse_of(values);
    let count = sparse_total(&sparse);
    if count == 0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    Some(quantiles(BASELINE, std::iter::empty(), &sparse, count, [q; 3])[0] as f64 / SCALE)
}

fn sparse_of(values: impl IntoIterator<Item = f64>) -> Sparse {
    let mut sparse = Sparse::new();
    for v in values.into_iter().filter_map(to_recorded) {
        codec::sparse_insert(&mut sparse, BASELINE.index_for(v), 1);
    }
    sparse
}

/// A rollup read back: a metric's histogram (its slot, its entries at
/// [`ROLLUP`](codec::ROLLUP)'s grain and their total) or an hour's counts.
enum Decoded {
    Hist(usize, Sparse, u64),
    Counts(Counts),
}

fn decode(r: &Rollup, report: &mut LoadReport) -> Option<Decoded> {
    match r.metric.as_str() {
        PROBES => return Some(Decoded::Counts(Counts { probes: r.count, errors: 0 })),
        ERRORS => return Some(Decoded::Counts(Counts { probes: 0, errors: r.count })),
        _ => {}
    }
    let Ok(metric) = r.metric.parse::<Metric>() else {
        report.skipped.push(BaselineError::UnknownMetric {
            target: r.target.id(),
            hour: r.hour,
            metric: r.metric.to_string(),
        });
        return None;
    };
    match decode_v2(&r.histogram) {
        Ok(entries) => {
            let count = sparse_total(&entries);
            Some(Decoded::Hist(metric.slot(), entries, count))
        }
        Err(message) => {
            report.skipped.push(BaselineError::Decode {
                target: r.target.id(),
                metric: r.metric.to_string(),
                hour: r.hour,
                message,
            });
            None
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};
    use std::time::Duration as StdDuration;

    fn config(min: u64) -> BaselineConfig {
        BaselineConfig {
            window: StdDuration::from_secs(7 * 86400),
            failover_factor: 2.0,
            min_samples_p50: min,
            min_samples_p95: min,
            min_samples_p99: min,
            adopt_after: Some(StdDuration::from_secs(3600)),
        }
    }

    fn target(route: &str) -> Target {
        Target::new("openrouter".into(), "m".into(), Some(route.into()), "eu".into())
    }

    fn sample(t: &Target, at: DateTime<Utc>, ttfb: f64, outcome: Outcome) -> Sample {
        let mut s = Sample::new(t.clone(), at, at);
        s.ttfb_ms = Some(ttfb);
        s.ttft_ms = Some(ttfb * 1.5);
        s.tokens_per_s = Some(60.0);
        s.outcome = outcome;
        s
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).single().expect("valid time")
    }

    #[test]
    fn only_ok_samples_count_and_quantiles_stay_null_below_minimum() {
        let mut b = Baselines::new(&config(10));
        let t = target("A");
        for i in 0..9 {
            b.record(&sample(&t, t0() + Duration::minutes(i), 100.0 + i as f64, Outcome::Ok));
        }
        b.record(&sample(&t, t0(), 9999.0, Outcome::ServerError));
        let now = t0() + Duration::minutes(30);
        assert_eq!(b.get(&t, Metric::Ttfb, now), Baseline { count: 9, p50: None, p95: None, p99: None });
        b.record(&sample(&t, t0() + Duration::minutes(10), 109.0, Outcome::Ok));
        let got = b.get(&t, Metric::Ttfb, now);
        assert_eq!(got.count, 10);
        assert_eq!(got.p50, Some(104.447), "5th of 100..109 ms, reported at the top of its 512 µs bucket (2 digits)");
        assert_eq!(b.get(&t, Metric::TokensPerS, now).p99, Some(60.159), "60 tok/s in a bucket 0.256 wide");
        assert_eq!(b.get(&target("unknown"), Metric::Ttft, now), Baseline::default());
    }

    #[test]
    fn a_weighted_sample_counts_as_often_as_its_interval_stands_for() {
        // Every minute a 100 ms sample; every third minute also a 400 ms one that stands for
        // three minutes (a target stretched to three intervals).
        let (mut weighted, mut unweighted, mut repeated) =
            (Baselines::new(&config(1)), Baselines::new(&config(1)), Baselines::new(&config(1)));
        let t = target("A");
        for m in 0..60 {
            let at = t0() + Duration::minutes(m);
            for b in [&mut weighted, &mut unweighted, &mut repeated] {
                b.record(&sample(&t, at, 100.0, Outcome::Ok));
            }
            if m % 3 == 0 {
                let slow = sample(&t, at, 400.0, Outcome::Ok);
                weighted.record_weighted(&slow, 3);
                unweighted.record(&slow);
                for _ in 0..3 {
                    repeated.record(&slow);
                }
            }
        }
        let now = t0() + Duration::minutes(90);
        let w = weighted.get(&t, Metric::Ttfb, now);
        assert_eq!(w, repeated.get(&t, Metric::Ttfb, now), "weight 3 = the same value three times");
        assert_eq!((w.count, unweighted.get(&t, Metric::Ttfb, now).count), (120, 80));
        let p75 = |b: &mut Baselines| b.quantile_any(&t, Metric::Ttfb, 0.75, now);
        assert!(p75(&mut weighted).is_some_and(|p| p > 390.0), "half the weight is slow: {:?}", p75(&mut weighted));
        assert!(p75(&mut unweighted).is_some_and(|p| p < 110.0), "unweighted, a quarter: {:?}", p75(&mut unweighted));
        weighted.record_weighted(&sample(&t, now, 9000.0, Outcome::Ok), 0);
        assert_eq!(weighted.get(&t, Metric::Ttfb, now).count, 120, "weight 0 stays out of the percentiles");
        assert_eq!(weighted.window_counts(&t).0, 81, "but counts as a probe");
    }

    #[test]
    fn samples_in_trouble_are_held_out_and_dropped_when_the_level_comes_back() {
        let mut b = Baselines::new(&config(10));
        let t = target("A");
        for m in 0..20 {
            b.record_guarded(&sample(&t, t0() + Duration::seconds(m), 100.0, Outcome::Ok), 1, false);
        }
        let now = t0() + Duration::minutes(1);
        let before = b.get(&t, Metric::Ttfb, now);
        for m in 20..40 {
            let adopted = b.record_guarded(&sample(&t, t0() + Duration::seconds(m), 900.0, Outcome::Ok), 1, true);
            assert!(adopted.is_none(), "far from adopt_after");
        }
        assert_eq!(b.get(&t, Metric::Ttfb, now), before, "twenty slow samples in trouble moved nothing");
        assert_eq!(b.window_counts(&t).0, 40, "but every probe is counted");
        assert_eq!(b.held_since(&t), Some(t0() + Duration::seconds(20)));
        b.record_guarded(&sample(&t, t0() + Duration::seconds(40), 100.0, Outcome::Ok), 1, false);
        assert_eq!(b.held_since(&t), None, "out of trouble: the held level is dropped");
        assert_eq!(b.adopt(&t, now, true), None, "nothing left to adopt");
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 21);
    }

    #[test]
    fn a_shift_held_for_adopt_after_is_adopted_once_as_the_new_level() {
        // adopt_after is an hour in `config`; a week of 100 ms, then a level of 300 ms in trouble.
        let mut b = Baselines::new(&config(10));
        let t = target("A");
        for m in 0..600 {
            b.record_guarded(&sample(&t, t0() + Duration::minutes(m), 100.0, Outcome::Ok), 1, false);
        }
        let start = t0() + Duration::minutes(600);
        let mut adopted = Vec::new();
        for m in 0..=60 {
            let at = start + Duration::minutes(m);
            adopted.extend(b.record_guarded(&sample(&t, at, 300.0 + m as f64 % 7.0, Outcome::Ok), 1, true));
        }
        assert_eq!(adopted.len(), 1, "one adoption, after an hour: {adopted:?}");
        let a = &adopted[0];
        assert_eq!(
            (a.since, a.at, a.metric, a.samples, a.by_request),
            (start, start + Duration::hours(1), Metric::Ttft, 61, false)
        );
        assert!(a.before.p95.is_some_and(|p| p < 160.0) && a.after.p95.is_some_and(|p| p > 450.0), "{a:?}");
        assert_eq!(a.weight, 30, "61 held × 30 ≥ three times the 600 in the window");
        let now = start + Duration::hours(1);
        let base = b.get(&t, Metric::Ttfb, now);
        assert!(base.p50.is_some_and(|p| p > 299.0), "the new level is the median now: {base:?}");
        assert!(base.p95.is_some_and(|p| p > 299.0 && p < 310.0), "and its P95: {base:?}");
        assert!(a.describe().contains("TTFT p50 151 ms p95 151 ms → p50 45"), "{}", a.describe());
        assert_eq!(b.held_since(&t), None);
    }

    #[test]
    fn adopting_on_request_needs_a_held_level_and_a_failed_sample_holds_no_value() {
        let mut b = Baselines::new(&BaselineConfig { adopt_after: None, ..config(1) });
        let t = target("A");
        b.record_guarded(&sample(&t, t0(), 100.0, Outcome::Ok), 1, false);
        assert_eq!(b.adopt(&t, t0(), true), None, "not in trouble");
        b.record_guarded(&sample(&t, t0() + Duration::days(30), 0.0, Outcome::ServerError), 1, true);
        assert_eq!(b.adopt(&t, t0(), true), None, "in trouble, but no value held");
        assert!(b.held_since(&t).is_some(), "still held: the next ok sample may bring a value");
        b.record_guarded(&sample(&t, t0() + Duration::days(30), 500.0, Outcome::Ok), 1, true);
        let a = b.adopt(&t, t0() + Duration::days(30), true).expect("adopted");
        assert!(
            a.by_request && a.after.p50 == Some(753.663),
            "TTFT 1.5 × 500 ms, at the top of its 4 ms bucket: {a:?}"
        );
    }

    #[test]
    fn window_slides_hour_by_hour_and_old_hours_drop_out() {
        let mut b = Baselines::new(&BaselineConfig { window: StdDuration::from_secs(3 * 3600), ..config(1) });
        let t = target("A");
        for hour in 0..3 {
            b.record(&sample(&t, t0() + Duration::hours(hour), 100.0 * (hour + 1) as f64, Outcome::Ok));
        }
        let at = |h: i64| t0() + Duration::hours(h) + Duration::minutes(5);
        assert_eq!(b.get(&t, Metric::Ttfb, at(2)).count, 3);
        assert_eq!(b.get(&t, Metric::Ttfb, at(3)).count, 2);
        b.refresh(at(4));
        let late = b.get(&t, Metric::Ttfb, at(4));
        assert_eq!(late.count, 1);
        assert_eq!(late.p50, Some(301.055), "300 ms at the top of its 2 ms bucket");
        b.refresh(at(5));
        assert_eq!(b.targets().count(), 0, "a target with no hour left in the window is forgotten");
    }

    #[test]
    fn a_late_sample_for_a_closed_hour_is_counted_once() {
        let mut b = Baselines::new(&config(1));
        let t = target("A");
        b.record(&sample(&t, t0(), 100.0, Outcome::Ok));
        let now = t0() + Duration::hours(2);
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 1);
        b.record(&sample(&t, t0() + Duration::minutes(59), 200.0, Outcome::Ok));
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 2);
        b.refresh(now + Duration::hours(1));
        assert_eq!(b.get(&t, Metric::Ttfb, now + Duration::hours(1)).count, 2);
    }

    /// Persists every dirty hour into `store` (upsert by target, metric and hour), as `Monitor::persist` does.
    fn persist(b: &mut Baselines, store: &mut Vec<Rollup>) {
        let dirty = b.dirty_rollups();
        for r in &dirty {
            store.retain(|s| (&s.target, &s.metric, s.hour) != (&r.target, &r.metric, r.hour));
            store.push(r.clone());
        }
        b.mark_persisted(&dirty);
    }

    #[test]
    fn stored_hours_fold_and_a_sample_too_late_for_a_folded_hour_is_left_out() {
        let mut b = Baselines::new(&config(1));
        let mut store = Vec::new();
        let t = target("A");
        b.record(&sample(&t, t0() + Duration::minutes(10), 100.0, Outcome::Ok));
        persist(&mut b, &mut store);
        let now = t0() + Duration::hours(3);
        b.refresh(now);
        assert!(b.series[&t].metrics[0].held.is_empty(), "a stored hour older than the hold is folded");
        b.record(&sample(&t, t0() + Duration::minutes(20), 150.0, Outcome::Ok));
        assert_eq!(b.late_samples(), 1);
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 1, "the late sample is left out");
        assert_eq!(b.window_counts(&t), (1, 0));
        b.record(&sample(&t, t0() + Duration::hours(2) + Duration::minutes(59), 200.0, Outcome::Ok));
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 2, "the previous hour still takes samples");
    }

    #[test]
    fn a_folded_histogram_hour_is_never_reopened_by_a_late_sample() {
        let mut b = Baselines::new(&config(1));
        let mut store = Vec::new();
        let t = target("A");
        b.record(&sample(&t, t0(), 100.0, Outcome::Ok));
        persist(&mut b, &mut store);
        // A failed probe of the same hour after the persist: only the counts are dirty again.
        b.record(&sample(&t, t0() + Duration::minutes(30), 0.0, Outcome::ServerError));
        b.refresh(t0() + Duration::hours(2));
        assert!(b.series[&t].metrics[0].held.is_empty(), "the stored histogram hour is folded");
        assert_eq!(b.series[&t].counts.held.len(), 1, "its unstored counts are still held");
        b.record(&sample(&t, t0() + Duration::minutes(40), 300.0, Outcome::Ok));
        let dirty = b.dirty_rollups();
        assert!(dirty.iter().all(|r| r.metric == PROBES || r.metric == ERRORS), "{dirty:?}");
        assert_eq!(b.get(&t, Metric::Ttfb, t0() + Duration::hours(2)).count, 1);
        assert_eq!(b.window_counts(&t), (3, 1));
    }

    #[test]
    fn an_unstored_hour_stays_held_until_it_is_persisted() {
        let mut b = Baselines::new(&config(1));
        let t = target("A");
        b.record(&sample(&t, t0(), 100.0, Outcome::Ok));
        b.refresh(t0() + Duration::hours(5));
        assert_eq!(b.series[&t].metrics[0].held.len(), 1, "storage never took it: kept so it can be");
        assert_eq!(b.dirty_rollups().len(), 5);
        let mut store = Vec::new();
        persist(&mut b, &mut store);
        b.refresh(t0() + Duration::hours(5));
        assert!(b.series[&t].metrics[0].held.is_empty());
        assert_eq!(b.get(&t, Metric::Ttfb, t0() + Duration::hours(5)).count, 1);
    }

    #[test]
    fn a_persist_of_ended_hours_leaves_the_hour_under_way_changed_for_later() {
        let mut b = Baselines::new(&config(1));
        let t = target("A");
        b.record(&sample(&t, t0() + Duration::minutes(50), 100.0, Outcome::Ok));
        b.record(&sample(&t, t0() + Duration::minutes(70), 120.0, Outcome::ServerError));
        let now = t0() + Duration::minutes(75);
        let hours = |rs: &[Rollup]| rs.iter().map(|r| r.hour).collect::<std::collections::BTreeSet<_>>();
        let ended = b.dirty_rollups_of(|_| true, Hours::EndedBy(now));
        assert_eq!(hours(&ended), [t0()].into(), "only the hour that ended: {ended:?}");
        assert_eq!(ended.len(), 5, "its histograms and counts");
        b.mark_persisted(&ended);
        let open = b.dirty_rollups_of(|_| true, Hours::EndedBy(now));
        assert!(open.is_empty(), "the hour under way waits: {open:?}");
        let all = b.dirty_rollups_of(|_| true, Hours::All);
        assert_eq!(hours(&all), [t0() + Duration::hours(1)].into(), "and is still changed for a later persist");
        assert_eq!(all.iter().find(|r| r.metric == PROBES).map(|r| r.count), Some(1));
        b.mark_persisted(&all);
        assert!(b.dirty_rollups().is_empty());
        // Once it has ended, the next persist of ended hours takes it.
        let later = b.dirty_rollups_of(|_| true, Hours::EndedBy(t0() + Duration::hours(2)));
        assert!(later.is_empty(), "nothing changed since it was taken: {later:?}");
        b.record(&sample(&t, t0() + Duration::minutes(80), 130.0, Outcome::Ok));
        let later = b.dirty_rollups_of(|_| true, Hours::EndedBy(t0() + Duration::hours(2)));
        assert_eq!(hours(&later), [t0() + Duration::hours(1)].into(), "{later:?}");
    }

    #[test]
    fn a_late_load_adds_to_held_hours_and_leaves_them_dirty() {
        let t = target("A");
        let mut before = Baselines::new(&config(1));
        let mut store = Vec::new();
        for m in 0..3 {
            before.record(&sample(&t, t0() + Duration::minutes(m), 100.0, Outcome::Ok));
        }
        persist(&mut before, &mut store);
        // Restarted while storage was down: two more samples of the same hour before the load.
        let now = t0() + Duration::minutes(30);
        let mut b = Baselines::new(&config(1));
        for m in 3..5 {
            b.record(&sample(&t, t0() + Duration::minutes(m), 120.0, Outcome::ServerError));
        }
        b.load(&store, now);
        assert_eq!(b.window_counts(&t), (5, 2));
        let dirty = b.dirty_rollups();
        let probes = dirty.iter().find(|r| r.metric == PROBES).expect("counts are dirty");
        assert_eq!(probes.count, 5, "the next persist writes the whole hour, not only the new part");
    }

    #[test]
    fn hours_leaving_the_window_are_subtracted_once_read_back() {
        let mut b = Baselines::new(&BaselineConfig { window: StdDuration::from_secs(3 * 3600), ..config(1) });
        let mut store = Vec::new();
        let t = target("A");
        for hour in 0..4 {
            for m in 0..=hour {
                b.record(&sample(&t, t0() + Duration::hours(hour) + Duration::minutes(m), 100.0, Outcome::Ok));
            }
            persist(&mut b, &mut store);
            b.refresh(t0() + Duration::hours(hour) + Duration::minutes(59));
        }
        let now = t0() + Duration::hours(3) + Duration::minutes(59);
        let (from, until) = b.expiring(now).expect("hour 0 has left the window");
        assert_eq!((from, until), (t0(), t0() + Duration::hours(1)));
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 1 + 2 + 3 + 4, "until read back the window reaches further");
        let expiring: Vec<Rollup> = store.iter().filter(|r| r.hour >= from && r.hour < until).cloned().collect();
        b.expire(&expiring, until);
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 2 + 3 + 4);
        assert_eq!(b.window_counts(&t), (9, 0));
        assert!(b.expiring(now).is_none());
        b.expire(&expiring, until);
        assert_eq!(b.get(&t, Metric::Ttfb, now).count, 9, "a repeated expiry subtracts nothing more");
    }

    #[test]
    fn dirty_rollups_persist_and_load_back_to_the_same_baselines() {
        let mut b = Baselines::new(&config(5));
        let t = target("A");
        for m in 0..200 {
            b.record(&sample(&t, t0() + Duration::minutes(m), 50.0 + (m % 37) as f64 * 7.5, Outcome::Ok));
        }
        let rollups = b.dirty_rollups();
        assert_eq!(rollups.len(), 4 * 5, "four hours × (three metrics, probes, errors)");
        assert_eq!(rollups.iter().filter(|r| r.metric == "ttfb").map(|r| r.count).sum::<i64>(), 200);
        b.mark_persisted(&rollups);
        assert!(b.dirty_rollups().is_empty());
        b.record(&sample(&t, t0() + Duration::minutes(201), 80.0, Outcome::Ok));
        assert_eq!(b.dirty_rollups().len(), 5, "only the touched hour is dirty again");

        let now = t0() + Duration::minutes(199);
        let mut restarted = Baselines::new(&config(5));
        let report = restarted.load(&rollups, now);
        assert_eq!((report.loaded, report.skipped.len()), (20, 0));
        b.rebuild_from_samples(&[]);
        for m in 0..200 {
            b.record(&sample(&t, t0() + Duration::minutes(m), 50.0 + (m % 37) as f64 * 7.5, Outcome::Ok));
        }
        for metric in Metric::ALL {
            assert_eq!(restarted.get(&t, metric, now), b.get(&t, metric, now), "{metric}");
        }
    }

    #[test]
    fn unreadable_rollups_are_skipped_with_a_reason() {
        let mut b = Baselines::new(&config(1));
        let bad = Rollup { target: target("A"), metric: "ttfb".into(), hour: t0(), count: 1, histogram: vec![1, 2] };
        let unknown = Rollup { metric: "latency".into(), ..bad.clone() };
        let report = b.load(&[bad, unknown], t0());
        assert_eq!(report.loaded, 0);
        let messages: Vec<String> = report.skipped.iter().map(|e| e.to_string()).collect();
        assert!(messages[0].contains("bad histogram"), "{messages:?}");
        assert!(messages[1].contains("unknown metric \"latency\""), "{messages:?}");
    }

    #[test]
    fn quantile_any_answers_below_the_minimum_counts_without_changing_them() {
        let config = crate::config::Config::from_toml("", &std::collections::BTreeMap::new()).expect("defaults");
        let mut b = Baselines::new(&config.baseline);
        let target = Target::new("p".into(), "m".into(), None, "r".into());
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 30, 0).single().expect("time");
        for v in 1..=10 {
            let mut s = Sample::new(target.clone(), now, now);
            s.outcome = Outcome::Ok;
            s.ttft_ms = Some(f64::from(v) * 100.0);
            b.record(&s);
        }
        assert_eq!(b.get(&target, Metric::Ttft, now).p95, None, "10 samples publish no P95");
        // Reported at the top of their buckets, under 0.8 % above the values.
        let max = b.quantile_any(&target, Metric::Ttft, 0.95, now).expect("a value");
        assert!((1000.0..=1008.0).contains(&max), "{max}");
        let median = b.quantile_any(&target, Metric::Ttft, 0.5, now).expect("a value");
        assert!((500.0..=504.0).contains(&median), "{median}");
        assert_eq!(b.quantile_any(&target, Metric::Ttfb, 0.5, now), None, "no TTFB values");
    }
}
