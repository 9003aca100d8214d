//! Rolling baselines: hourly HdrHistogram rollups per target × metric, merged over the window.
//!
//! Values are bucketed exactly as an `hdrhistogram::Histogram<u64>` with bounds 1 µs..10 min and
//! 3 significant digits buckets them, but held sparsely (bucket index → count): a dense histogram
//! of that range is 172 KB, and a week of hourly ones per target would not fit in memory.
//! Each series holds its recent hours one by one plus one merged histogram of the rest of the
//! window; a refresh folds in an hour once it is stored, and the hour leaving the window is read
//! back from storage and subtracted, so nothing rescans raw samples or re-merges the window and
//! memory does not grow with its length. Persisted rollups are hdrhistogram V2 bytes.

use crate::config::BaselineConfig;
use crate::sample::{Outcome, Sample};
use crate::store::Rollup;
use crate::target::Target;
use chrono::{DateTime, TimeZone, Utc};
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Lowest recordable value (1 µs, or 0.001 tok/s).
pub const LOWEST: u64 = 1;
/// Highest recordable value (10 min in µs); larger values are clamped to it.
pub const HIGHEST: u64 = 600_000_000;
/// Significant digits kept by every histogram.
pub const SIGFIG: u8 = 3;
/// Recorded units per published unit: µs per ms, milli-tokens per token.
const SCALE: f64 = 1000.0;

// Bucket layout of hdrhistogram for (LOWEST = 1, SIGFIG = 3): 2048 sub-buckets, half of them per bucket.
const HALF_MAGNITUDE: u32 = 10;
const HALF_COUNT: u32 = 1 << HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (2 * HALF_COUNT as u64) - 1;
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_HEADER_LEN: usize = 40;

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
    /// Serializing a rollup failed.
    #[error("serializing rollup: {0}")]
    Encode(String),
}

/// The metrics that get baselines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Time to first byte, ms.
    Ttfb,
    /// Time to first content token, ms.
    Ttft,
    /// Generation speed, tokens per second.
    TokensPerS,
}

impl Metric {
    /// Every metric, in storage order.
    pub const ALL: [Metric; 3] = [Metric::Ttfb, Metric::Ttft, Metric::TokensPerS];

    /// The stored name (`ttfb`, `ttft`, `tokens_per_s`).
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Ttfb => "ttfb",
            Metric::Ttft => "ttft",
            Metric::TokensPerS => "tokens_per_s",
        }
    }

    /// This metric's value in a sample, in published units (ms or tok/s).
    pub fn value(self, sample: &Sample) -> Option<f64> {
        match self {
            Metric::Ttfb => sample.ttfb_ms,
            Metric::Ttft => sample.ttft_ms,
            Metric::TokensPerS => sample.tokens_per_s,
        }
    }

    /// How people write it in alerts and reasons (`TTFB`, `TTFT`, `tokens/s`).
    pub fn label(self) -> &'static str {
        match self {
            Metric::Ttfb => "TTFB",
            Metric::Ttft => "TTFT",
            Metric::TokensPerS => "tokens/s",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| format!("unknown metric {s:?}"))
    }
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

/// The P95s a probe's latency is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencyP95 {
    /// P95 of time to first byte, ms.
    pub ttfb: Option<f64>,
    /// P95 of time to first token, ms.
    pub ttft: Option<f64>,
}

/// One probe's worst latency against its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Excess {
    /// The metric with the highest value/threshold ratio.
    pub metric: Metric,
    /// The probe's value, ms.
    pub value: f64,
    /// `factor` × that metric's P95, ms.
    pub threshold: f64,
}

impl Excess {
    /// The value is over the threshold.
    pub fn exceeded(&self) -> bool {
        self.value > self.threshold
    }
}

/// The threshold of one metric: `factor` × its P95 (what the router export publishes).
pub fn failover_threshold(p95: f64, factor: f64) -> f64 {
    factor * p95
}

/// The one meaning of "over the threshold" that the breaker, the status page, the latency
/// alerts and the export share: a probe is over when its TTFB *or* its TTFT is above `factor` ×
/// that metric's own P95 (a provider that answers headers at once but queues generation is as
/// slow for a user as one that is slow to answer). Returns the metric with the worst
/// value/threshold ratio, over or not; `None` when neither metric has both a value and a P95.
pub fn worst_excess(ttfb_ms: Option<f64>, ttft_ms: Option<f64>, p95: LatencyP95, factor: f64) -> Option<Excess> {
    let mut worst: Option<Excess> = None;
    for (metric, value, base) in [(Metric::Ttfb, ttfb_ms, p95.ttfb), (Metric::Ttft, ttft_ms, p95.ttft)] {
        let (Some(value), Some(base)) = (value, base) else { continue };
        let e = Excess { metric, value, threshold: failover_threshold(base, factor) };
        let ratio = |e: &Excess| e.value / e.threshold.max(f64::MIN_POSITIVE);
        if worst.as_ref().is_none_or(|w| ratio(&e) > ratio(w)) {
            worst = Some(e);
        }
    }
    worst
}

/// Whether a probe is over its threshold in the sense of [`worst_excess`].
pub fn exceeds_failover(ttfb_ms: Option<f64>, ttft_ms: Option<f64>, p95: LatencyP95, factor: f64) -> bool {
    worst_excess(ttfb_ms, ttft_ms, p95, factor).is_some_and(|e| e.exceeded())
}

/// Outcome of [`Baselines::load`]: rollups taken and rollups skipped as unreadable.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Rollups loaded.
    pub loaded: usize,
    /// Unreadable rollups, with why (they are skipped so one bad row cannot block a start).
    pub skipped: Vec<BaselineError>,
}

/// Sparse histogram: (hdrhistogram bucket index, count), ascending by index.
type Sparse = Vec<(u32, u32)>;

/// hdrhistogram's bucket index of a value (after clamping to the recordable range).
fn index_for(value: u64) -> u32 {
    let v = value.clamp(LOWEST, HIGHEST);
    let bucket = 53 - (v | SUB_BUCKET_MASK).leading_zeros();
    let sub_bucket = (v >> bucket) as u32;
    ((bucket + 1) << HALF_MAGNITUDE) + sub_bucket - HALF_COUNT
}

/// Lowest value and width of the bucket at `index`.
fn bucket_range(index: u32) -> (u64, u64) {
    let mut bucket = (index >> HALF_MAGNITUDE) as i64 - 1;
    let mut sub_bucket = u64::from((index & (HALF_COUNT - 1)) + HALF_COUNT);
    if bucket < 0 {
        sub_bucket -= u64::from(HALF_COUNT);
        bucket = 0;
    }
    (sub_bucket << bucket, 1u64 << bucket)
}

/// The value hdrhistogram reports for a quantile landing in bucket `index` (its highest equivalent).
fn reported_value(index: u32) -> u64 {
    let (low, width) = bucket_range(index);
    low + width - 1
}

/// Scales a published value (ms, tok/s) to the recorded integer; `None` for missing or nonsense values.
fn to_recorded(value: f64) -> Option<u64> {
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    let scaled = (value * SCALE).round();
    Some((scaled as u64).clamp(LOWEST, HIGHEST))
}

fn sparse_insert(hist: &mut Sparse, index: u32, n: u32) {
    match hist.binary_search_by_key(&index, |e| e.0) {
        Ok(i) => hist[i].1 = hist[i].1.saturating_add(n),
        Err(i) => hist.insert(i, (index, n)),
    }
}

/// `a + b`, or `a - b` (entries reaching zero are dropped).
fn sparse_merge(a: &[(u32, u32)], b: &[(u32, u32)], subtract: bool) -> Sparse {
    let mut out = Vec::with_capacity(a.len() + if subtract { 0 } else { b.len() });
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let take_a = j >= b.len() || (i < a.len() && a[i].0 < b[j].0);
        let take_b = i >= a.len() || (j < b.len() && b[j].0 < a[i].0);
        if take_a {
            out.push(a[i]);
            i += 1;
        } else if take_b {
            if !subtract {
                out.push(b[j]);
            }
            j += 1;
        } else {
            let c = if subtract { a[i].1.saturating_sub(b[j].1) } else { a[i].1.saturating_add(b[j].1) };
            if c > 0 {
                out.push((a[i].0, c));
            }
            i += 1;
            j += 1;
        }
    }
    out
}

fn sparse_total(hist: &[(u32, u32)]) -> u64 {
    hist.iter().map(|e| u64::from(e.1)).sum()
}

/// Nearest-rank quantiles (as hdrhistogram computes them) over the sum of two sparse histograms.
fn quantiles(a: impl Iterator<Item = (u32, u32)>, b: &[(u32, u32)], total: u64, qs: [f64; 3]) -> [u64; 3] {
    let mut out = [0u64; 3];
    let ranks = qs.map(|q| ((q * total as f64).ceil() as u64).max(1));
    let mut a = a.peekable();
    let (mut j, mut seen, mut k) = (0, 0u64, 0);
    while k < 3 {
        let (index, count) = match (a.peek().copied(), b.get(j).copied()) {
            (None, None) => break,
            (Some(x), Some(y)) if x.0 == y.0 => {
                a.next();
                j += 1;
                (x.0, x.1.saturating_add(y.1))
            }
            (Some(x), Some(y)) if y.0 < x.0 => {
                j += 1;
                y
            }
            (None, Some(y)) => {
                j += 1;
                y
            }
            (Some(x), _) => {
                a.next();
                x
            }
        };
        seen += u64::from(count);
        while k < 3 && seen >= ranks[k] {
            out[k] = reported_value(index);
            k += 1;
        }
    }
    out
}

/// A sparse histogram packed as LEB128 (index delta, count) pairs: about 2 bytes an entry instead of 8,
/// which is what lets a week of hourly rollups for thousands of targets stay in memory.
#[derive(Debug, Clone, Default, PartialEq)]
struct Packed(Box<[u8]>);

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Packed {
    fn pack(entries: impl IntoIterator<Item = (u32, u32)>) -> Packed {
        let mut out = Vec::new();
        let mut previous = 0;
        for (index, count) in entries {
            put_varint(&mut out, index - previous);
            put_varint(&mut out, count);
            previous = index;
        }
        Packed(out.into_boxed_slice())
    }

    fn iter(&self) -> PackedIter<'_> {
        PackedIter { bytes: &self.0, pos: 0, index: 0 }
    }

    fn unpack(&self) -> Sparse {
        self.iter().collect()
    }

    /// `self ± other` as a new packed histogram, streamed without unpacking `self`.
    fn merged(&self, other: &[(u32, u32)], subtract: bool) -> Packed {
        let mut out = Vec::with_capacity(self.0.len() + if subtract { 0 } else { 3 * other.len() });
        let mut previous = 0;
        let mut emit = |(index, count): (u32, u32)| {
            put_varint(&mut out, index - previous);
            put_varint(&mut out, count);
            previous = index;
        };
        let mut a = self.iter().peekable();
        let mut j = 0;
        loop {
            match (a.peek().copied(), other.get(j).copied()) {
                (None, None) => break,
                (Some(x), Some(y)) if x.0 == y.0 => {
                    a.next();
                    j += 1;
                    let c = if subtract { x.1.saturating_sub(y.1) } else { x.1.saturating_add(y.1) };
                    if c > 0 {
                        emit((x.0, c));
                    }
                }
                (Some(x), Some(y)) if y.0 < x.0 => {
                    j += 1;
                    if !subtract {
                        emit(y);
                    }
                }
                (None, Some(y)) => {
                    j += 1;
                    if !subtract {
                        emit(y);
                    }
                }
                (Some(x), _) => {
                    a.next();
                    emit(x);
                }
            }
        }
        Packed(out.into_boxed_slice())
    }
}

struct PackedIter<'a> {
    bytes: &'a [u8],
    pos: usize,
    index: u32,
}

impl PackedIter<'_> {
    fn varint(&mut self) -> Option<u32> {
        let mut v = 0u32;
        for shift in (0..35).step_by(7) {
            let b = *self.bytes.get(self.pos)?;
            self.pos += 1;
            v |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
}

impl Iterator for PackedIter<'_> {
    type Item = (u32, u32);
    fn next(&mut self) -> Option<(u32, u32)> {
        let delta = self.varint()?;
        let count = self.varint()?;
        self.index += delta;
        Some((self.index, count))
    }
}

/// Encodes a sparse histogram as hdrhistogram V2 bytes, through a reusable dense scratch histogram.
fn encode_v2(scratch: &mut Histogram<u64>, hist: &[(u32, u32)]) -> Result<Vec<u8>, BaselineError> {
    scratch.reset();
    for &(index, count) in hist {
        let (low, _) = bucket_range(index);
        scratch.record_n(low, u64::from(count)).map_err(|e| BaselineError::Encode(e.to_string()))?;
    }
    let mut bytes = Vec::with_capacity(V2_HEADER_LEN + 4 * hist.len());
    V2Serializer::new().serialize(scratch, &mut bytes).map_err(|e| BaselineError::Encode(e.to_string()))?;
    Ok(bytes)
}

/// Decodes V2 bytes into a sparse histogram. Our own layout is read directly (a start loads
/// millions of rollups); anything else goes through hdrhistogram's deserializer.
fn decode_v2(bytes: &[u8]) -> Result<Sparse, String> {
    if let Some(sparse) = decode_v2_fast(bytes) {
        return Ok(sparse);
    }
    let hist: Histogram<u64> =
        Deserializer::new().deserialize(&mut std::io::Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let mut sparse = Sparse::new();
    for v in hist.iter_recorded() {
        let count = u32::try_from(v.count_at_value()).map_err(|_| "count too large".to_string())?;
        sparse_insert(&mut sparse, index_for(v.value_iterated_to()), count);
    }
    Ok(sparse)
}

fn decode_v2_fast(bytes: &[u8]) -> Option<Sparse> {
    let word = |at: usize| -> Option<[u8; 8]> { bytes.get(at..at + 8)?.try_into().ok() };
    let int = |at: usize| -> Option<u32> { Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?)) };
    let ours = int(0)? == V2_COOKIE
        && int(8)? == 0
        && int(12)? == u32::from(SIGFIG)
        && u64::from_be_bytes(word(16)?) == LOWEST
        && f64::from_be_bytes(word(32)?) == 1.0;
    if !ours {
        return None;
    }
    let payload = bytes.get(V2_HEADER_LEN..V2_HEADER_LEN + int(4)? as usize)?;
    let max_index = index_for(HIGHEST);
    let (mut pos, mut index, mut sparse) = (0usize, 0u64, Sparse::new());
    while pos < payload.len() {
        let mut raw = 0u64;
        for shift in 0..9 {
            let b = *payload.get(pos)?;
            pos += 1;
            if shift == 8 {
                raw |= u64::from(b) << 56;
                break;
            }
            raw |= u64::from(b & 0x7f) << (7 * shift);
            if b & 0x80 == 0 {
                break;
            }
        }
        let n = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
        if n < 0 {
            index += n.unsigned_abs();
        } else {
            if n > 0 {
                let at = u32::try_from(index).ok()?.min(max_index);
                sparse_insert(&mut sparse, at, u32::try_from(n).ok()?);
            }
            index += 1;
        }
    }
    Some(sparse)
}

/// The `q` quantile of one stored rollup in published units (ms or tok/s), as hdrhistogram
/// reports it; `None` for an empty or unreadable histogram.
pub fn rollup_quantile(rollup: &Rollup, q: f64) -> Option<f64> {
    let sparse = decode_v2(&rollup.histogram).ok()?;
    let total = sparse_total(&sparse);
    if total == 0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    Some(quantiles(std::iter::empty(), &sparse, total, [q; 3])[0] as f64 / SCALE)
}

fn hour_of(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(3600)
}

fn hour_start(hour: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(hour * 3600, 0).single().unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Rollup metric name of an hour's probe count (stored without a histogram).
pub const PROBES: &str = "probes";
/// Rollup metric name of an hour's failed-probe count (stored without a histogram).
pub const ERRORS: &str = "errors";

/// The current hour and this many before it stay held one by one, so a probe that finishes
/// after the hour turned still lands in the hour it started in.
const HOLD: i64 = 1;

/// What one hour of one series adds up: a histogram, or probe and error counts.
trait Tally: Default + Clone {
    fn add(&mut self, other: &Self);
    fn subtract(&mut self, other: &Self);
    fn is_empty(&self) -> bool;
}

/// A histogram with its total.
#[derive(Debug, Clone, Default, PartialEq)]
struct Hist {
    packed: Packed,
    count: u64,
}

impl Tally for Hist {
    fn add(&mut self, other: &Self) {
        self.packed = self.packed.merged(&other.packed.unpack(), false);
        self.count += other.count;
    }
    fn subtract(&mut self, other: &Self) {
        self.packed = self.packed.merged(&other.packed.unpack(), true);
        self.count = self.count.saturating_sub(other.count);
    }
    fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Probes and failed probes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Counts {
    probes: i64,
    errors: i64,
}

impl Tally for Counts {
    fn add(&mut self, other: &Self) {
        self.probes += other.probes;
        self.errors += other.errors;
    }
    fn subtract(&mut self, other: &Self) {
        self.probes = (self.probes - other.probes).max(0);
        self.errors = (self.errors - other.errors).max(0);
    }
    fn is_empty(&self) -> bool {
        self.probes == 0 && self.errors == 0
    }
}

/// An hour held on its own; `version` counts changes and `persisted` the version the store has.
#[derive(Debug, Clone)]
struct Held<T> {
    hour: i64,
    tally: T,
    version: u32,
    persisted: u32,
}

/// One series over the window: recent hours held one by one, every other hour of the window
/// folded into one tally. Only the held hours and the fold live in memory; an hour leaving the
/// window is read back from storage to be subtracted (see [`Baselines::expire`]).
#[derive(Debug, Clone, Default)]
struct Window<T> {
    held: VecDeque<Held<T>>,
    folded: T,
}

impl<T: Tally> Window<T> {
    /// The held hour `hour`, created when `create` (a sample for an hour already folded is refused).
    fn held_mut(&mut self, hour: i64, create: bool) -> Option<&mut Held<T>> {
        let pos = self.held.iter().rposition(|h| h.hour <= hour);
        let slot = match pos {
            Some(p) if self.held[p].hour == hour => p,
            _ if !create => return None,
            _ => {
                let at = pos.map_or(0, |p| p + 1);
                self.held.insert(at, Held { hour, tally: T::default(), version: 0, persisted: 0 });
                at
            }
        };
        Some(&mut self.held[slot])
    }

    /// Drops held hours older than `oldest` (never folded: nothing to subtract) and folds stored
    /// hours older than `hold_from`. Returns whether anything changed and the oldest hour folded.
    fn advance(&mut self, hold_from: i64, oldest: i64) -> (bool, Option<i64>) {
        let mut changed = false;
        let mut first_folded = None;
        while let Some(h) = self.held.front() {
            if h.hour < oldest {
                self.held.pop_front();
                changed = true;
            } else if h.hour < hold_from && h.version == h.persisted {
                if let Some(h) = self.held.pop_front() {
                    self.folded.add(&h.tally);
                    first_folded = first_folded.or(Some(h.hour));
                    changed = true;
                }
            } else {
                break;
            }
        }
        (changed, first_folded)
    }

    /// Takes a stored hour: merged into a held hour (the store had what came before a restart),
    /// held when recent, else folded.
    fn load(&mut self, hour: i64, tally: &T, hold_from: i64) {
        if let Some(h) = self.held_mut(hour, hour >= hold_from) {
            h.tally.add(tally);
            // The store has only its part: the held hour stays dirty when it had more.
            let dirty = h.version != h.persisted;
            h.version = h.version.wrapping_add(1);
            h.persisted = if dirty { h.persisted } else { h.version };
        } else {
            self.folded.add(tally);
        }
    }

    fn holds(&self, hour: i64) -> bool {
        self.held.iter().any(|h| h.hour == hour)
    }

    fn total(&self, mut f: impl FnMut(&T) -> u64) -> u64 {
        f(&self.folded) + self.held.iter().map(|h| f(&h.tally)).sum::<u64>()
    }

    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.folded.is_empty()
    }
}

/// One target's windows: a histogram per metric and the probe/error counts.
#[derive(Debug, Clone, Default)]
struct Series {
    metrics: [Window<Hist>; 3],
    counts: Window<Counts>,
    cached: [Option<Baseline>; 3],
    /// The last [`Baselines::quantile_any`] answer per metric (q's bits, value), dropped with `cached`:
    /// the router export asks for it every second for every target still short of a P95.
    any: [Option<(u64, Option<f64>)>; 3],
}

impl Series {
    /// Drops the cached percentiles of one metric after its values changed.
    fn invalidate(&mut self, slot: usize) {
        self.cached[slot] = None;
        self.any[slot] = None;
    }

    fn compute(&self, slot: usize, min: [u64; 3]) -> Baseline {
        let w = &self.metrics[slot];
        let recent = w.held.iter().fold(Sparse::new(), |acc, h| sparse_merge(&acc, &h.tally.packed.unpack(), false));
        let count = w.total(|h| h.count);
        if count == 0 {
            return Baseline::default();
        }
        let values = quantiles(w.folded.packed.iter(), &recent, count, [0.5, 0.95, 0.99]);
        let publish = |k: usize| (count >= min[k]).then(|| values[k] as f64 / SCALE);
        Baseline { count, p50: publish(0), p95: publish(1), p99: publish(2) }
    }

    fn advance(&mut self, hold_from: i64, oldest: i64) -> Option<i64> {
        let mut first = None;
        for (slot, w) in self.metrics.iter_mut().enumerate() {
            let (changed, folded) = w.advance(hold_from, oldest);
            if changed {
                self.cached[slot] = None;
                self.any[slot] = None;
            }
            first = min_opt(first, folded);
        }
        min_opt(first, self.counts.advance(hold_from, oldest).1)
    }

    fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.metrics.iter().all(Window::is_empty)
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

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
    series: HashMap<Target, Series>,
    /// Hours at or after this stay held; it only moves forward.
    hold_from: i64,
    /// Oldest hour that may be in a fold; `None` while nothing is folded.
    folded_from: Option<i64>,
    /// Samples too late for their hour (already folded), left out of the baselines.
    late: u64,
}

impl Baselines {
    /// Empty baselines following `[baseline]`.
    pub fn new(config: &BaselineConfig) -> Self {
        let window_hours = (config.window.as_secs().div_ceil(3600)).max(1) as i64;
        Baselines {
            window_hours,
            min: [config.min_samples_p50, config.min_samples_p95, config.min_samples_p99],
            series: HashMap::new(),
            hold_from: i64::MIN,
            folded_from: None,
            late: 0,
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
                h.tally.packed = h.tally.packed.merged(&[(index, weight)], false);
                h.tally.count += u64::from(weight);
                h.version = h.version.wrapping_add(1);
                series.invalidate(slot);
            }
        }
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
                Some(Decoded::Counts(c)) if !series.counts.holds(hour) => series.counts.folded.subtract(&c),
                Some(Decoded::Hist(slot, h)) if !series.metrics[slot].holds(hour) => {
                    series.metrics[slot].folded.subtract(&h);
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
            let recent =
                w.held.iter().fold(Sparse::new(), |acc, h| sparse_merge(&acc, &h.tally.packed.unpack(), false));
            let values = quantiles(w.folded.packed.iter(), &recent, count, [q, q, q]);
            Some(values[0] as f64 / SCALE)
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
    pub fn dirty_rollups(&self) -> Result<Vec<Rollup>, BaselineError> {
        let mut scratch = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG)
            .map_err(|e| BaselineError::Encode(e.to_string()))?;
        let mut out = Vec::new();
        let rollup = |target: &Target, metric: &str, hour: i64, count: i64, histogram: Vec<u8>| Rollup {
            target: target.clone(),
            metric: metric.to_string(),
            hour: hour_start(hour),
            count,
            histogram,
        };
        for (target, series) in &self.series {
            for metric in Metric::ALL {
                for h in series.metrics[metric.slot()].held.iter().filter(|h| h.version != h.persisted) {
                    let bytes = encode_v2(&mut scratch, &h.tally.packed.unpack())?;
                    let count = i64::try_from(h.tally.count).unwrap_or(i64::MAX);
                    out.push(rollup(target, metric.as_str(), h.hour, count, bytes));
                }
            }
            for h in series.counts.held.iter().filter(|h| h.version != h.persisted) {
                out.push(rollup(target, PROBES, h.hour, h.tally.probes, Vec::new()));
                out.push(rollup(target, ERRORS, h.hour, h.tally.errors, Vec::new()));
            }
        }
        Ok(out)
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

    /// Loads stored rollups of the window ending at `now` (see [`Window::load`]); unreadable ones
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
                Decoded::Hist(slot, h) => {
                    series.metrics[slot].load(hour, &h, hold_from);
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

    /// Loads the window ending at `now` from storage an hour at a time, so a start never holds a
    /// week of rollups at once.
    pub async fn load_from(
        &mut self,
        store: &dyn crate::store::Store,
        region: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<LoadReport, crate::store::StoreError> {
        let mut report = LoadReport::default();
        for hour in self.oldest(now)..=hour_of(now) {
            let rollups = store.rollups_between(region, hour_start(hour), Some(hour_start(hour + 1))).await?;
            let part = self.load_hour(&rollups, now);
            report.loaded += part.loaded;
            report.skipped.extend(part.skipped);
        }
        Ok(report)
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

/// A rollup read back: a metric's histogram or an hour's counts.
enum Decoded {
    Hist(usize, Hist),
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
            metric: r.metric.clone(),
        });
        return None;
    };
    match decode_v2(&r.histogram) {
        Ok(hist) => {
            let count = sparse_total(&hist);
            Some(Decoded::Hist(metric.slot(), Hist { packed: Packed::pack(hist), count }))
        }
        Err(message) => {
            report.skipped.push(BaselineError::Decode {
                target: r.target.id(),
                metric: r.metric.clone(),
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
    use chrono::Duration;
    use rand::{RngExt, SeedableRng};
    use std::time::Duration as StdDuration;

    fn config(min: u64) -> BaselineConfig {
        BaselineConfig {
            window: StdDuration::from_secs(7 * 86400),
            failover_factor: 2.0,
            min_samples_p50: min,
            min_samples_p95: min,
            min_samples_p99: min,
        }
    }

    fn target(route: &str) -> Target {
        Target { provider: "openrouter".into(), model: "m".into(), route: Some(route.into()), region: "eu".into() }
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
    fn bucketing_matches_hdrhistogram() {
        let h = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("histogram");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut values: Vec<u64> = (0..20_000).map(|_| rng.random_range(1..=HIGHEST)).collect();
        values.extend([1, 2, 2047, 2048, 2049, 4095, 4096, 65_535, HIGHEST]);
        for v in values {
            let (low, width) = bucket_range(index_for(v));
            assert_eq!(low, h.lowest_equivalent(v), "lowest of {v}");
            assert_eq!(low + width - 1, h.highest_equivalent(v), "highest of {v}");
        }
    }

    #[test]
    fn quantiles_match_hdrhistogram_on_the_same_values() {
        let mut h = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("histogram");
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let (mut a, mut b) = (Sparse::new(), Sparse::new());
        for i in 0..5000 {
            let v = rng.random_range(1_000..2_000_000u64);
            h.record(v).expect("record");
            sparse_insert(if i % 3 == 0 { &mut b } else { &mut a }, index_for(v), 1);
        }
        let got = quantiles(Packed::pack(a.clone()).iter(), &b, 5000, [0.5, 0.95, 0.99]);
        let want = [0.5, 0.95, 0.99].map(|q| h.value_at_quantile(q));
        assert_eq!(got, want);
    }

    #[test]
    fn v2_round_trip_agrees_with_hdrhistogram_deserializer() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut sparse = Sparse::new();
        for _ in 0..500 {
            sparse_insert(&mut sparse, index_for(rng.random_range(1..HIGHEST)), rng.random_range(1..1000));
        }
        let mut scratch = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("histogram");
        let bytes = encode_v2(&mut scratch, &sparse).expect("encode");
        assert_eq!(decode_v2_fast(&bytes).expect("our layout"), sparse);
        let via_library: Histogram<u64> =
            Deserializer::new().deserialize(&mut std::io::Cursor::new(&bytes)).expect("library decode");
        let mut from_library = Sparse::new();
        for v in via_library.iter_recorded() {
            sparse_insert(&mut from_library, index_for(v.value_iterated_to()), v.count_at_value() as u32);
        }
        assert_eq!(from_library, sparse);
    }

    #[test]
    fn packed_histograms_round_trip_merge_and_subtract() {
        let entries: Sparse = vec![(0, 1), (5, 300), (21_000, 70_000), (21_503, u32::MAX)];
        let p = Packed::pack(entries.clone());
        assert_eq!(p.unpack(), entries);
        assert!(p.0.len() < 8 * entries.len());
        let added = p.merged(&[(5, 1), (6, 2)], false).unpack();
        assert_eq!(added, [(0, 1), (5, 301), (6, 2), (21_000, 70_000), (21_503, u32::MAX)]);
        assert_eq!(p.merged(&[(5, 300)], true).unpack(), [(0, 1), (21_000, 70_000), (21_503, u32::MAX)]);
    }

    #[test]
    fn foreign_layouts_decode_through_the_library() {
        let mut other = Histogram::<u64>::new_with_bounds(1, 10_000_000, 2).expect("histogram");
        other.record_n(123_456, 5).expect("record");
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&other, &mut bytes).expect("serialize");
        let sparse = decode_v2(&bytes).expect("decodes");
        assert_eq!(sparse_total(&sparse), 5);
        assert!(decode_v2(b"not a histogram").is_err());
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
        assert_eq!(got.p50, Some(104.063), "5th of 100..109 ms, reported at its bucket's top (µs resolution 1/1024)");
        assert_eq!(b.get(&t, Metric::TokensPerS, now).p99, Some(60.031));
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
        assert_eq!(late.p50, Some(300.031));
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
        let dirty = b.dirty_rollups().expect("serialize");
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
        let dirty = b.dirty_rollups().expect("serialize");
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
        assert_eq!(b.dirty_rollups().expect("serialize").len(), 5);
        let mut store = Vec::new();
        persist(&mut b, &mut store);
        b.refresh(t0() + Duration::hours(5));
        assert!(b.series[&t].metrics[0].held.is_empty());
        assert_eq!(b.get(&t, Metric::Ttfb, t0() + Duration::hours(5)).count, 1);
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
        let dirty = b.dirty_rollups().expect("serialize");
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
        let rollups = b.dirty_rollups().expect("serialize");
        assert_eq!(rollups.len(), 4 * 5, "four hours × (three metrics, probes, errors)");
        assert_eq!(rollups.iter().filter(|r| r.metric == "ttfb").map(|r| r.count).sum::<i64>(), 200);
        b.mark_persisted(&rollups);
        assert!(b.dirty_rollups().expect("serialize").is_empty());
        b.record(&sample(&t, t0() + Duration::minutes(201), 80.0, Outcome::Ok));
        assert_eq!(b.dirty_rollups().expect("serialize").len(), 5, "only the touched hour is dirty again");

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
        let target = Target { provider: "p".into(), model: "m".into(), route: None, region: "r".into() };
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 30, 0).single().expect("time");
        for v in 1..=10 {
            let mut s = Sample::new(target.clone(), now, now);
            s.outcome = Outcome::Ok;
            s.ttft_ms = Some(f64::from(v) * 100.0);
            b.record(&s);
        }
        assert_eq!(b.get(&target, Metric::Ttft, now).p95, None, "10 samples publish no P95");
        let max = b.quantile_any(&target, Metric::Ttft, 0.95, now).expect("a value");
        assert!((999.0..=1001.0).contains(&max), "{max}");
        let median = b.quantile_any(&target, Metric::Ttft, 0.5, now).expect("a value");
        assert!((499.0..=501.0).contains(&median), "{median}");
        assert_eq!(b.quantile_any(&target, Metric::Ttfb, 0.5, now), None, "no TTFB values");
    }
}
