//! Hour windows of one series: the recent hours held one by one, the rest of the window folded
//! into one tally, and how an hour moves from held to folded to gone.

use super::codec::sparse_merge;
use super::codec::Packed;
use super::codec::Sparse;
use super::codec::BASELINE;
use super::codec::PUBLISHED;
use super::codec::SCALE;
use super::Baseline;
use chrono::{DateTime, TimeZone, Utc};
use smallvec::SmallVec;

pub(super) fn hour_of(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(3600)
}

pub(super) fn hour_start(hour: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(hour * 3600, 0).single().unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The current hour and this many before it stay held one by one, so a probe that finishes
/// after the hour turned still lands in the hour it started in.
pub(super) const HOLD: i64 = 1;

/// What one hour of one series adds up: a histogram, or probe and error counts.
pub(super) trait Tally: Default + Clone {
    /// Adds another part of the same hour.
    fn add(&mut self, other: &Self);
    fn is_empty(&self) -> bool;
    /// Adds an hour to a window's fold, which may hold it coarser than an hour is held.
    fn fold_in(&mut self, hour: &Self) {
        self.add(hour);
    }
    /// Takes an hour folded in by [`Tally::fold_in`] out of the fold again.
    fn fold_out(&mut self, hour: &Self);
}

/// A histogram with its total: an hour at [`ROLLUP`](super::codec::ROLLUP)'s grain, a fold at
/// [`BASELINE`]'s.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Hist {
    pub(super) packed: Packed,
    pub(super) count: u64,
}

impl Tally for Hist {
    fn add(&mut self, other: &Self) {
        self.packed.merge(&other.packed.unpack(), false);
        self.count += other.count;
    }
    fn is_empty(&self) -> bool {
        self.count == 0
    }
    fn fold_in(&mut self, hour: &Self) {
        self.fold_entries(hour.packed.iter(), hour.count, false);
    }
    fn fold_out(&mut self, hour: &Self) {
        self.fold_entries(hour.packed.iter(), hour.count, true);
    }
}

impl Hist {
    /// Adds to this fold (or with `out` takes from it) an hour's entries at
    /// [`ROLLUP`](super::codec::ROLLUP)'s grain, `count` values in all, mapped to the fold's.
    pub(super) fn fold_entries(&mut self, hour: impl IntoIterator<Item = (u32, u32)>, count: u64, out: bool) {
        self.packed.merge(&BASELINE.coarsen(hour), out);
        self.count = if out { self.count.saturating_sub(count) } else { self.count + count };
    }
}

/// Probes and failed probes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Counts {
    pub(super) probes: i64,
    pub(super) errors: i64,
}

impl Tally for Counts {
    fn add(&mut self, other: &Self) {
        self.probes += other.probes;
        self.errors += other.errors;
    }
    fn is_empty(&self) -> bool {
        self.probes == 0 && self.errors == 0
    }
    fn fold_out(&mut self, hour: &Self) {
        self.probes = (self.probes - hour.probes).max(0);
        self.errors = (self.errors - hour.errors).max(0);
    }
}

/// An hour held on its own; `version` counts changes and `persisted` the version the store has.
#[derive(Debug, Clone)]
pub(super) struct Held<T> {
    pub(super) hour: i64,
    pub(super) tally: T,
    pub(super) version: u32,
    pub(super) persisted: u32,
}

impl<T> Held<T> {
    /// Whether the store has this hour as it is now.
    pub(super) fn is_stored(&self) -> bool {
        self.version == self.persisted
    }
}

/// Held hours kept inside the window itself: the current hour and the one before are all a
/// window usually holds, where a buffer of its own took four slots for the two, per window.
pub(super) type HeldHours<T> = SmallVec<[Held<T>; HOLD as usize + 1]>;

/// One series over the window: recent hours held one by one, every other hour of the window
/// folded into one tally. Only the held hours and the fold live in memory; an hour leaving the
/// window is read back from storage to be subtracted (see [`Baselines::expire`](super::Baselines::expire)).
#[derive(Debug, Clone, Default)]
pub(super) struct Window<T> {
    pub(super) held: HeldHours<T>,
    pub(super) folded: T,
}

impl<T: Tally> Window<T> {
    /// The held hour `hour`, created when `create` (a sample for an hour already folded is refused).
    pub(super) fn held_mut(&mut self, hour: i64, create: bool) -> Option<&mut Held<T>> {
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
    pub(super) fn advance(&mut self, hold_from: i64, oldest: i64) -> (bool, Option<i64>) {
        let mut changed = false;
        let mut first_folded = None;
        while let Some(h) = self.held.first() {
            if h.hour < oldest {
                self.held.remove(0);
                changed = true;
            } else if h.hour < hold_from && h.is_stored() {
                let h = self.held.remove(0);
                self.folded.fold_in(&h.tally);
                first_folded = first_folded.or(Some(h.hour));
                changed = true;
            } else {
                break;
            }
        }
        if changed && self.held.spilled() && self.held.len() <= self.held.inline_size() {
            // A third hour held over an hour boundary moved them to a buffer; back inside.
            self.held.shrink_to_fit();
        }
        (changed, first_folded)
    }

    /// Takes a stored hour: merged into a held hour (the store had what came before a restart),
    /// held when recent, else folded.
    pub(super) fn load(&mut self, hour: i64, tally: &T, hold_from: i64) {
        if let Some(h) = self.held_mut(hour, hour >= hold_from) {
            h.tally.add(tally);
            // The store has only its part: the held hour stays dirty when it had more.
            let dirty = !h.is_stored();
            h.version = h.version.wrapping_add(1);
            h.persisted = if dirty { h.persisted } else { h.version };
        } else {
            self.folded.fold_in(tally);
        }
    }

    pub(super) fn holds(&self, hour: i64) -> bool {
        self.held.iter().any(|h| h.hour == hour)
    }

    pub(super) fn total(&self, mut f: impl FnMut(&T) -> u64) -> u64 {
        f(&self.folded) + self.held.iter().map(|h| f(&h.tally)).sum::<u64>()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty() && self.folded.is_empty()
    }
}

impl Window<Hist> {
    /// Takes a stored hour as read back (entries at [`ROLLUP`](super::codec::ROLLUP)'s grain):
    /// as [`Window::load`], but an hour that is only folded goes straight into the fold, without
    /// a packed copy made to be read once (most of a start's week).
    pub(super) fn load_entries(&mut self, hour: i64, entries: Sparse, count: u64, hold_from: i64) {
        if hour >= hold_from || self.holds(hour) {
            self.load(hour, &Hist { packed: Packed::pack(entries), count }, hold_from);
        } else {
            self.folded.fold_entries(entries, count, false);
        }
    }

    /// Nearest-rank quantiles of the whole window (`count` values), at [`BASELINE`]'s grain.
    pub(super) fn quantiles(&self, count: u64, qs: [f64; 3]) -> [u64; 3] {
        // Each held hour read straight into the fold's buckets: no unpacked copy at 3 digits.
        let recent = self
            .held
            .iter()
            .fold(Sparse::new(), |acc, h| sparse_merge(&acc, &BASELINE.coarsen(h.tally.packed.iter()), false));
        self.folded.packed.quantiles(BASELINE, &recent, count, qs)
    }
}

/// One target's windows: a histogram per metric and the probe/error counts.
#[derive(Debug, Clone, Default)]
pub(super) struct Series {
    pub(super) metrics: [Window<Hist>; 3],
    pub(super) counts: Window<Counts>,
    pub(super) cached: [Option<Baseline>; 3],
    /// The last [`Baselines::quantile_any`](super::Baselines::quantile_any) answer per metric (q's bits, value), dropped with `cached`:
    /// the router export asks for it every second for every target still short of a P95.
    pub(super) any: [Option<(u64, Option<f64>)>; 3],
}

impl Series {
    /// Drops the cached percentiles of one metric after its values changed.
    pub(super) fn invalidate(&mut self, slot: usize) {
        self.cached[slot] = None;
        self.any[slot] = None;
    }

    pub(super) fn compute(&self, slot: usize, min: [u64; 3]) -> Baseline {
        let w = &self.metrics[slot];
        let count = w.total(|h| h.count);
        if count == 0 {
            return Baseline::default();
        }
        let values = w.quantiles(count, PUBLISHED);
        let publish = |k: usize| (count >= min[k]).then(|| values[k] as f64 / SCALE);
        Baseline { count, p50: publish(0), p95: publish(1), p99: publish(2) }
    }

    pub(super) fn advance(&mut self, hold_from: i64, oldest: i64) -> Option<i64> {
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

    pub(super) fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.metrics.iter().all(Window::is_empty)
    }
}

pub(super) fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::super::codec::{index_for, sparse_insert, sparse_total};
    use super::*;

    fn hour(values: impl Iterator<Item = u64>) -> Hist {
        let mut sparse = Sparse::new();
        for v in values {
            sparse_insert(&mut sparse, index_for(v), 1);
        }
        let count = sparse_total(&sparse);
        Hist { packed: Packed::pack(sparse), count }
    }

    #[test]
    fn a_windows_held_hours_live_inside_it_and_fold_oldest_first() {
        let mut w = Window::<Counts>::default();
        for hour in [11, 10] {
            if let Some(h) = w.held_mut(hour, true) {
                h.tally.probes = hour;
            }
        }
        assert!(!w.held.spilled(), "the current hour and the one before take no buffer of their own");
        assert!(w.held_mut(12, true).is_some());
        assert_eq!(w.held.iter().map(|h| h.hour).collect::<Vec<_>>(), [10, 11, 12], "a third spills over, in order");
        let (changed, first) = w.advance(11, 0);
        assert_eq!((changed, first), (true, Some(10)));
        assert_eq!((w.held.len(), w.folded.probes), (2, 10), "the oldest hour is folded");
        assert!(!w.held.spilled(), "and the two left are back inside");
    }

    #[test]
    fn an_hour_folded_in_and_taken_out_leaves_the_fold_as_it_was() {
        // Values tens of µs apart around 90 ms, where 3-digit buckets are 64 µs wide and 2-digit 512.
        let a = hour((0..500).map(|i| 90_000 + i * 37));
        let b = hour((0..300).map(|i| 95_000 + i * 53));
        let mut fold = Hist::default();
        fold.fold_in(&a);
        assert_eq!(fold.packed.unpack(), BASELINE.coarsen(a.packed.iter()), "the fold holds the hour at its grain");
        assert!(fold.packed.unpack().len() < a.packed.unpack().len(), "in fewer buckets");
        let before = fold.clone();
        fold.fold_in(&b);
        assert_ne!(fold, before);
        fold.fold_out(&b);
        assert_eq!(fold, before, "taking the hour out leaves the fold exact");
    }
}
