//! The sparse histogram codec: hdrhistogram's bucket layout held as (bucket index, count) pairs,
//! packed in memory, merged and queried by nearest rank, and read and written as V2 bytes.

use crate::vocab::records::Rollup;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use std::sync::OnceLock;

/// Lowest recordable value (1 µs, or 0.001 tok/s).
pub const LOWEST: u64 = 1;
/// Highest recordable value (10 min in µs); larger values are clamped to it.
pub const HIGHEST: u64 = 600_000_000;
/// Significant digits kept by every histogram.
pub const SIGFIG: u8 = 3;
/// Recorded units per published unit: µs per ms, milli-tokens per token.
pub(super) const SCALE: f64 = 1000.0;

// Bucket layout of hdrhistogram for (LOWEST = 1, SIGFIG = 3): 2048 sub-buckets, half of them per bucket.
const HALF_MAGNITUDE: u32 = 10;
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_HEADER_LEN: usize = 40;

/// Sparse histogram: (bucket index, count), ascending by index.
pub(super) type Sparse = Vec<(u32, u32)>;

/// A bucket layout: hdrhistogram's for `LOWEST` = 1 at some significant digits. A bucket index
/// means nothing without its grain, so every index here is [`ROLLUP`]'s unless it says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grain {
    /// log2 of half the sub-buckets (10 at 3 significant digits, 7 at 2).
    half_magnitude: u32,
}

/// Stored rollups, the recent hours and the guard's held values: 3 significant digits
/// ([`SIGFIG`]; buckets 0.05–0.1 % of their value wide, 1 µs below 2 ms).
pub(super) const ROLLUP: Grain = Grain { half_magnitude: HALF_MAGNITUDE };

/// The window's fold and every published percentile: 2 significant digits (buckets 0.4–0.8 % of
/// their value wide, 1 µs below 256 µs). Each holds whole [`ROLLUP`] buckets, so a fold is its
/// hours' sum either way and an hour taken away leaves it exact; a week's fold at 3 digits was
/// most of what stored history costs in memory (docs/BENCHMARKS.md, "Baselines").
pub(super) const BASELINE: Grain = Grain { half_magnitude: 7 };

impl Grain {
    fn half_count(self) -> u32 {
        1 << self.half_magnitude
    }

    /// The bucket index of a value (after clamping to the recordable range).
    pub(super) fn index_for(self, value: u64) -> u32 {
        let v = value.clamp(LOWEST, HIGHEST);
        let sub_bucket_mask = (2u64 << self.half_magnitude) - 1;
        let bucket = 63 - self.half_magnitude - (v | sub_bucket_mask).leading_zeros();
        let sub_bucket = (v >> bucket) as u32;
        ((bucket + 1) << self.half_magnitude) + sub_bucket - self.half_count()
    }

    /// Lowest value and width of the bucket at `index`.
    fn bucket_range(self, index: u32) -> (u64, u64) {
        let half = self.half_count();
        let mut bucket = (index >> self.half_magnitude) as i64 - 1;
        let mut sub_bucket = u64::from((index & (half - 1)) + half);
        if bucket < 0 {
            sub_bucket -= u64::from(half);
            bucket = 0;
        }
        (sub_bucket << bucket, 1u64 << bucket)
    }

    /// The value hdrhistogram reports for a quantile landing in bucket `index` (its highest equivalent).
    fn reported_value(self, index: u32) -> u64 {
        let (low, width) = self.bucket_range(index);
        low + width - 1
    }

    /// [`ROLLUP`] entries (ascending) in this grain's buckets.
    pub(super) fn coarsen(self, rollup: impl IntoIterator<Item = (u32, u32)>) -> Sparse {
        let mut out = Sparse::new();
        for (index, count) in rollup {
            let at = self.index_for(ROLLUP.bucket_range(index).0);
            match out.last_mut() {
                Some(last) if last.0 == at => last.1 = last.1.saturating_add(count),
                _ => out.push((at, count)),
            }
        }
        out
    }
}

/// hdrhistogram's bucket index of a value at [`ROLLUP`]'s grain.
pub(super) fn index_for(value: u64) -> u32 {
    ROLLUP.index_for(value)
}

/// Scales a published value (ms, tok/s) to the recorded integer; `None` for missing or nonsense values.
pub(super) fn to_recorded(value: f64) -> Option<u64> {
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    let scaled = (value * SCALE).round();
    Some((scaled as u64).clamp(LOWEST, HIGHEST))
}

pub(super) fn sparse_insert(hist: &mut Sparse, index: u32, n: u32) {
    match hist.binary_search_by_key(&index, |e| e.0) {
        Ok(i) => hist[i].1 = hist[i].1.saturating_add(n),
        Err(i) => hist.insert(i, (index, n)),
    }
}

/// `a + b`, or `a - b` (entries reaching zero are dropped).
pub(super) fn sparse_merge(a: &[(u32, u32)], b: &[(u32, u32)], subtract: bool) -> Sparse {
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

pub(super) fn sparse_total(hist: &[(u32, u32)]) -> u64 {
    hist.iter().map(|e| u64::from(e.1)).sum()
}

/// Nearest-rank quantiles (as hdrhistogram computes them) over the sum of two sparse histograms
/// of `grain`.
pub(super) fn quantiles(
    grain: Grain,
    a: impl Iterator<Item = (u32, u32)>,
    b: &[(u32, u32)],
    total: u64,
    qs: [f64; 3],
) -> [u64; 3] {
    let mut out = [0u64; 3];
    let ranks = qs.map(|q| ((q * total as f64).ceil() as u64).max(1));
    let (mut a, mut j, mut seen, mut k) = (a.peekable(), 0, 0u64, 0);
    while k < 3 {
        let Some((index, _, count)) = next_merged(&mut a, b, &mut j) else { break };
        seen += u64::from(count);
        while k < 3 && seen >= ranks[k] {
            out[k] = grain.reported_value(index);
            k += 1;
        }
    }
    out
}

/// The next bucket of `a` and `b[*j..]` summed by index: the bucket, its count in `a`, its count in both.
fn next_merged(
    a: &mut std::iter::Peekable<impl Iterator<Item = (u32, u32)>>,
    b: &[(u32, u32)],
    j: &mut usize,
) -> Option<(u32, u32, u32)> {
    match (a.peek().copied(), b.get(*j).copied()) {
        (None, None) => None,
        (Some(x), Some(y)) if x.0 == y.0 => {
            a.next();
            *j += 1;
            Some((x.0, x.1, x.1.saturating_add(y.1)))
        }
        (Some(x), Some(y)) if y.0 < x.0 => {
            *j += 1;
            Some((y.0, 0, y.1))
        }
        (None, Some(y)) => {
            *j += 1;
            Some((y.0, 0, y.1))
        }
        (Some(x), _) => {
            a.next();
            Some((x.0, x.1, x.1))
        }
    }
}

/// A sparse histogram packed in 4-bit nibbles, about 0.7 bytes an entry (LEB128 pairs took 2, the
/// unpacked pairs 8): the week's merged histograms are most of what stored history costs in
/// memory. The baselines' heap at 10,000 targets on a week was 136 MB in LEB128 pairs, 67 MB in
/// nibbles, 38 MB with the folds at [`BASELINE`]'s grain, and 30 MB with the per-series
/// bookkeeping trimmed too (docs/BENCHMARKS.md, "Baselines").
///
/// Most entries of a latency histogram sit in the bucket right after the previous one with a small
/// count, so that case is one nibble holding the count (1–14). Nibble 15 is the next bucket with a
/// count of 15 or more (15 plus a varint follows); nibble 0 is any other entry (a varint index
/// delta, then a varint count). A varint is 3 bits a nibble, low first, the fourth bit saying
/// another follows. Two nibbles a byte, low first; a last odd nibble is padded with 0, which reads
/// as an entry cut short and ends the iteration.
///
/// Nibbles decode slower than bytes, so a packed histogram also keeps, once asked, where its
/// reading can resume near each baseline percentile ([`Packed::quantiles`]): a refresh then
/// reads a few dozen entries of the week's fold instead of all of them.
///
/// The bytes sit in a buffer as large as the allocator's 16-byte granule holds ([`granule`]), and
/// a merge writes through a scratch buffer of its thread and back into them ([`Packed::merge`]):
/// a histogram that grows by a few bytes an hour (a week's fold as a start reads its week back,
/// an hour as its samples arrive) keeps its place instead of moving to a new allocation each time,
/// and leaves no trail of freed blocks between the daemon's lasting state.
#[derive(Debug, Default)]
pub(super) struct Packed(Vec<u8>, OnceLock<Box<[Mark; 3]>>);

impl Clone for Packed {
    fn clone(&self) -> Self {
        Packed(sized(&self.0), self.1.clone())
    }
}

/// The usable size of the smallest block the allocator hands out for `len` bytes: glibc's blocks
/// are 16-byte granules less an 8-byte header, at least 24 usable bytes.
fn granule(len: usize) -> usize {
    (len + 8).div_ceil(16).max(2) * 16 - 8
}

/// `bytes` in a buffer of their [`granule`].
fn sized(bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(granule(bytes.len()));
    v.extend_from_slice(bytes);
    v
}

thread_local! {
    /// Where [`Packed::merge`] writes before copying back: one buffer a thread, kept between merges.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl PartialEq for Packed {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

/// The percentiles every baseline publishes, in the order [`Packed::quantiles`] is asked them.
pub(super) const PUBLISHED: [f64; 3] = [0.5, 0.95, 0.99];

/// A place to resume reading a [`Packed`]: before the entry at bucket `next`, with `below`
/// counted in the entries before it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Mark {
    /// Nibble offset of the entry.
    nibble: u32,
    /// Bucket of the entry before (the reader's running index).
    index: u32,
    next: u32,
    below: u64,
}

/// The sum of the sixteen nibbles of `word`.
#[inline(always)]
fn nibble_sum(word: u64) -> u64 {
    const LOW: u64 = 0x0f0f_0f0f_0f0f_0f0f;
    // Pairs of nibbles into bytes (each at most 30), then the eight bytes added in the top one.
    let bytes = (word & LOW) + ((word >> 4) & LOW);
    bytes.wrapping_mul(0x0101_0101_0101_0101) >> 56
}

/// Writes [`Packed`]'s nibbles, sixteen at a time through one word.
struct Nibbles {
    out: Vec<u8>,
    word: u64,
    /// Nibbles in `word`.
    filled: u32,
    previous: u32,
}

impl Nibbles {
    /// A writer into the thread's scratch buffer (see [`Packed::replace`]).
    fn scratch() -> Nibbles {
        let mut out = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        out.clear();
        Nibbles { out, word: 0, filled: 0, previous: 0 }
    }

    #[inline(always)]
    fn put(&mut self, nibble: u32) {
        self.word |= u64::from(nibble) << (4 * self.filled);
        self.filled += 1;
        if self.filled == 16 {
            self.out.extend_from_slice(&self.word.to_le_bytes());
            (self.word, self.filled) = (0, 0);
        }
    }

    /// Puts `n` (1–16) nibbles at once, the first in the lowest bits of `nibbles`.
    #[inline(always)]
    fn put_many(&mut self, nibbles: u64, n: u32) {
        self.word |= nibbles << (4 * self.filled);
        let filled = self.filled + n;
        if filled >= 16 {
            self.out.extend_from_slice(&self.word.to_le_bytes());
            // The nibbles that did not fit in the word just written (none when all sixteen did).
            let used = 16 - self.filled;
            self.word = if used == 16 { 0 } else { nibbles >> (4 * used) };
            self.filled = filled - 16;
        } else {
            self.filled = filled;
        }
    }

    #[inline(always)]
    fn varint(&mut self, mut v: u32) {
        while v >= 8 {
            self.put((v & 7) | 8);
            v >>= 3;
        }
        self.put(v);
    }

    #[inline(always)]
    fn entry(&mut self, (index, count): (u32, u32)) {
        let delta = index - self.previous;
        self.previous = index;
        match count {
            1..=14 if delta == 1 => self.put(count),
            _ => self.long_entry(delta, count),
        }
    }

    fn long_entry(&mut self, delta: u32, count: u32) {
        if delta == 1 && count >= 15 {
            self.put(15);
            self.varint(count - 15);
        } else {
            self.put(0);
            self.varint(delta);
            self.varint(count);
        }
    }

    /// The bytes written, the last word's nibbles flushed.
    fn finish(mut self) -> Vec<u8> {
        let bytes = (self.filled as usize).div_ceil(2);
        self.out.extend_from_slice(&self.word.to_le_bytes()[..bytes]);
        self.out
    }
}

impl Packed {
    pub(super) fn pack(entries: impl IntoIterator<Item = (u32, u32)>) -> Packed {
        let mut out = Nibbles::scratch();
        entries.into_iter().for_each(|e| out.entry(e));
        let mut p = Packed::default();
        p.replace(out.finish());
        p
    }

    /// Takes `bytes` (the thread's scratch buffer, given back after): copied into this buffer
    /// when they fit it, else into a new one of their granule; marks are dropped.
    fn replace(&mut self, bytes: Vec<u8>) {
        // A buffer left a granule or more too large (an hour taken out of a fold) is given back.
        if bytes.len() > self.0.capacity() || granule(bytes.len()) < self.0.capacity() {
            self.0 = sized(&bytes);
        } else {
            self.0.clear();
            self.0.extend_from_slice(&bytes);
        }
        self.1 = OnceLock::new();
        SCRATCH.with(|s| *s.borrow_mut() = bytes);
    }

    pub(super) fn iter(&self) -> PackedIter<'_> {
        PackedIter { bytes: &self.0, word: 0, left: 0, index: 0 }
    }

    /// The reader at `mark`.
    fn iter_at(&self, mark: &Mark) -> PackedIter<'_> {
        let start = (mark.nibble / 2) as usize;
        let mut it = PackedIter { bytes: self.0.get(start..).unwrap_or_default(), word: 0, left: 0, index: mark.index };
        if mark.nibble % 2 == 1 {
            it.nibble();
        }
        it
    }

    /// For each of [`PUBLISHED`], the last entry at which at most the quantile's share of
    /// `total` (this histogram's count) less a margin lies below: the margin leaves room for the
    /// recent hours' samples, which sit anywhere in the distribution and move the rank by at most
    /// their count. A mark is checked where it is used, so `total` only has to be near the truth
    /// for the marks to be near the ranks; it is asked only when the marks are first made. Runs
    /// of one-nibble entries are summed a word at a time and looked at one by one only where a
    /// limit falls inside them.
    fn marks(&self, total: impl FnOnce() -> u64) -> &[Mark; 3] {
        self.1.get_or_init(|| {
            let total = total();
            let margin = total / 64 + 64;
            let limits = PUBLISHED.map(|q| ((q * total as f64) as u64).saturating_sub(margin));
            let mut marks = [Mark::default(); 3];
            let mut it = self.iter();
            let mut below = 0u64;
            loop {
                let (nibbles, n) = it.short_run(u32::MAX);
                if n > 0 {
                    // The run's entries are buckets `it.index - n + 1 ..= it.index`, one nibble
                    // each, ending at the reader's offset.
                    let end = it.nibble_offset(self.0.len());
                    let sum = nibble_sum(nibbles);
                    let last_below = below + sum - ((nibbles >> (4 * (n - 1))) & 0x0f);
                    for (mark, limit) in marks.iter_mut().zip(limits) {
                        if last_below <= limit {
                            *mark = Mark { nibble: end - 1, index: it.index - 1, next: it.index, below: last_below };
                        } else if below <= limit {
                            // The limit falls inside the run: its entries one by one.
                            let mut b = below;
                            for i in 0..n {
                                if b > limit {
                                    break;
                                }
                                let next = it.index - n + 1 + i;
                                *mark = Mark { nibble: end - n + i, index: next - 1, next, below: b };
                                b += (nibbles >> (4 * i)) & 0x0f;
                            }
                        }
                    }
                    below += sum;
                    continue;
                }
                let (nibble, index) = (it.nibble_offset(self.0.len()), it.index);
                let Some((next, count)) = it.next() else { break };
                for (mark, limit) in marks.iter_mut().zip(limits) {
                    if below <= limit {
                        *mark = Mark { nibble, index, next, below };
                    }
                }
                below += u64::from(count);
            }
            Box::new(marks)
        })
    }

    /// [`quantiles`] of this histogram plus `recent` (`total` counting both), resuming at the
    /// marks of [`Packed::marks`] where they lie before the rank sought; the same answers as
    /// reading from the start.
    pub(super) fn quantiles(&self, grain: Grain, recent: &[(u32, u32)], total: u64, qs: [f64; 3]) -> [u64; 3] {
        let ranks = qs.map(|q| ((q * total as f64).ceil() as u64).max(1));
        // The fold's own count, summed only when its marks are first made (once per fold).
        let marks = self.marks(|| total.saturating_sub(sparse_total(recent)));
        let mut out = [0u64; 3];
        let (mut a, mut j, mut seen, mut read_below) = (self.iter().peekable(), 0usize, 0u64, 0u64);
        let (mut k, mut look) = (0, true);
        while k < 3 {
            // Once per rank sought: jump ahead to the furthest mark past what was read that lies
            // before rank k (counting the recent entries below it).
            if std::mem::take(&mut look) {
                for mark in marks.iter().rev() {
                    if mark.below <= read_below {
                        continue;
                    }
                    let (mut j2, mut recent_below) = (j, 0u64);
                    while let Some(e) = recent.get(j2).filter(|e| e.0 < mark.next) {
                        recent_below += u64::from(e.1);
                        j2 += 1;
                    }
                    let at = mark.below + (seen - read_below) + recent_below;
                    if at < ranks[k] {
                        (a, j, seen, read_below) = (self.iter_at(mark).peekable(), j2, at, mark.below);
                        break;
                    }
                }
            }
            // Read on to rank k, as `quantiles` does.
            let Some((index, from_fold, count)) = next_merged(&mut a, recent, &mut j) else { break };
            read_below += u64::from(from_fold);
            seen += u64::from(count);
            while k < 3 && seen >= ranks[k] {
                out[k] = grain.reported_value(index);
                k += 1;
                look = true;
            }
        }
        out
    }

    pub(super) fn unpack(&self) -> Sparse {
        self.iter().collect()
    }

    /// `self ± other`, in place (see [`Packed::replace`]), streamed without unpacking `self`. Runs of
    /// next-bucket entries that the merge leaves as they were (most of a week's fold, when an
    /// hour is added or taken away) are copied as nibbles, up to sixteen at a time, without
    /// decoding them one by one; only the entries `other` touches, and the one after each entry
    /// it inserts or empties (whose distance to the bucket before changes), are encoded again.
    pub(super) fn merge(&mut self, other: &[(u32, u32)], subtract: bool) {
        let mut out = Nibbles::scratch();
        merge_entries(&mut out, self.iter(), other, subtract);
        self.replace(out.finish());
    }

    /// [`merge`](Self::merge) into a copy.
    #[cfg(test)]
    pub(super) fn merged(&self, other: &[(u32, u32)], subtract: bool) -> Packed {
        let mut p = self.clone();
        p.merge(other, subtract);
        p
    }
}

/// Writes `a ± other` to `out` (see [`Packed::merge`]).
fn merge_entries(out: &mut Nibbles, mut a: PackedIter<'_>, other: &[(u32, u32)], subtract: bool) {
    // The entry of `a` read and not yet written.
    let mut x: Option<(u32, u32)> = None;
    let mut j = 0;
    loop {
        if x.is_none() {
            // The writer stands where the reader does (nothing inserted or dropped just
            // before), so the next entries' nibbles hold as they are, up to `other`'s next.
            if out.previous == a.index {
                let limit = other.get(j).map_or(u32::MAX, |y| y.0.saturating_sub(a.index).saturating_sub(1));
                let (nibbles, n) = a.short_run(limit);
                if n > 0 {
                    out.put_many(nibbles, n);
                    out.previous = a.index;
                    continue;
                }
            }
            x = a.next();
        }
        match (x, other.get(j).copied()) {
            (None, None) => break,
            (Some(e), Some(y)) if e.0 == y.0 => {
                x = None;
                j += 1;
                let c = if subtract { e.1.saturating_sub(y.1) } else { e.1.saturating_add(y.1) };
                if c > 0 {
                    out.entry((e.0, c));
                }
            }
            (Some(e), Some(y)) if y.0 < e.0 => {
                j += 1;
                if !subtract {
                    out.entry(y);
                }
            }
            (None, Some(y)) => {
                j += 1;
                if !subtract {
                    out.entry(y);
                }
            }
            (Some(e), _) => {
                x = None;
                out.entry(e);
            }
        }
    }
}

/// The entries of a [`Packed`], ascending by index.
pub(super) struct PackedIter<'a> {
    /// Bytes not yet read into `word`.
    bytes: &'a [u8],
    word: u64,
    /// Nibbles left in `word`.
    left: u32,
    index: u32,
}

impl PackedIter<'_> {
    /// Nibbles read so far, of a histogram `len` bytes long.
    fn nibble_offset(&self, len: usize) -> u32 {
        u32::try_from(2 * (len - self.bytes.len())).unwrap_or(u32::MAX) - self.left
    }

    /// Loads the next word when the last is used up; false at the end.
    #[inline(always)]
    fn refill(&mut self) -> bool {
        if self.left == 0 {
            let take = self.bytes.len().min(8);
            if take == 0 {
                return false;
            }
            let mut word = [0u8; 8];
            word[..take].copy_from_slice(&self.bytes[..take]);
            self.bytes = &self.bytes[take..];
            (self.word, self.left) = (u64::from_le_bytes(word), 2 * take as u32);
        }
        true
    }

    #[inline(always)]
    fn nibble(&mut self) -> Option<u32> {
        if !self.refill() {
            return None;
        }
        let nibble = (self.word & 0x0f) as u32;
        self.word >>= 4;
        self.left -= 1;
        Some(nibble)
    }

    #[inline(always)]
    fn varint(&mut self) -> Option<u32> {
        match self.nibble()? {
            n @ 0..8 => Some(n),
            n => self.varint_rest(n & 7),
        }
    }

    /// A varint's nibbles after a first that said more follow.
    #[cold]
    fn varint_rest(&mut self, mut v: u32) -> Option<u32> {
        for shift in (3..33).step_by(3) {
            let n = self.nibble()?;
            v |= (n & 7) << shift;
            if n & 8 == 0 {
                return Some(v);
            }
        }
        None
    }
}

impl PackedIter<'_> {
    /// Reads, at most `max` and at most the rest of the current word, the entries that are each
    /// the next bucket with a count of 1–14 (one nibble apiece): their nibbles, the first lowest,
    /// and how many. None (0) when the next entry is of another kind or there is none.
    #[inline(always)]
    fn short_run(&mut self, max: u32) -> (u64, u32) {
        const ONES: u64 = 0x1111_1111_1111_1111;
        const HIGHS: u64 = 0x8888_8888_8888_8888;
        if !self.refill() {
            return (0, 0);
        }
        // The lowest nibble that is 0 or 15 (the two that start a longer entry) is found exactly
        // by the classic zero-in-word test, on the word and on its complement. Past `left` the
        // word holds zeros, so the run also stops there.
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
        let long = zero(self.word) | zero(!self.word);
        let n = (long.trailing_zeros() / 4).min(self.left).min(max);
        if n == 0 {
            return (0, 0);
        }
        let nibbles = if n == 16 { self.word } else { self.word & ((1u64 << (4 * n)) - 1) };
        self.word = if n == 16 { 0 } else { self.word >> (4 * n) };
        self.left -= n;
        self.index = self.index.wrapping_add(n);
        (nibbles, n)
    }
}

impl Iterator for PackedIter<'_> {
    type Item = (u32, u32);
    #[inline(always)]
    fn next(&mut self) -> Option<(u32, u32)> {
        let (delta, count) = match self.nibble()? {
            0 => (self.varint()?, self.varint()?),
            15 => (1, self.varint()?.saturating_add(15)),
            count => (1, count),
        };
        self.index = self.index.wrapping_add(delta);
        Some((self.index, count))
    }
}

/// Encodes a sparse histogram as hdrhistogram V2 bytes, byte for byte what `V2Serializer` writes
/// for the same counts, straight from the pairs: the library's way went through a dense 172 KB
/// histogram (cleared, then scanned to the highest bucket) for every rollup, a third of a
/// minute's work at 10,000 targets. Pairs must ascend by index, as every [`Sparse`] does.
pub(super) fn encode_v2(hist: &[(u32, u32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(V2_HEADER_LEN + 4 * hist.len() + 2);
    out.extend_from_slice(&V2_COOKIE.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes()); // payload length, set below
    out.extend_from_slice(&0u32.to_be_bytes()); // normalizing index offset
    out.extend_from_slice(&u32::from(SIGFIG).to_be_bytes());
    out.extend_from_slice(&LOWEST.to_be_bytes());
    out.extend_from_slice(&HIGHEST.to_be_bytes());
    out.extend_from_slice(&1.0f64.to_be_bytes()); // integer to double conversion ratio

    // The counts from index 0 to the highest pair's: a run of two or more empty buckets is one
    // negative number, a single empty bucket a 0 (as the library writes them).
    let zeros = |out: &mut Vec<u8>, run: u64| match run {
        0 => {}
        1 => varint(out, 0),
        n => varint(out, zig_zag(-(i64::try_from(n).unwrap_or(i64::MAX)))),
    };
    let (mut run, mut next) = (u64::from(hist.is_empty()), 0u64);
    for &(index, count) in hist {
        run += u64::from(index).saturating_sub(next);
        next = u64::from(index) + 1;
        if count == 0 {
            run += 1;
            continue;
        }
        zeros(&mut out, run);
        run = 0;
        varint(&mut out, zig_zag(i64::from(count)));
    }
    zeros(&mut out, run);
    let payload = u32::try_from(out.len() - V2_HEADER_LEN).unwrap_or(u32::MAX);
    out[4..8].copy_from_slice(&payload.to_be_bytes());
    out
}

fn zig_zag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

/// hdrhistogram's variable-length integer: 7 bits a byte for eight bytes, then a ninth of 8 bits.
fn varint(out: &mut Vec<u8>, v: u64) {
    for group in 0..8 {
        let rest = v >> (7 * (group + 1));
        let bits = ((v >> (7 * group)) & 0x7f) as u8;
        if rest == 0 {
            out.push(bits);
            return;
        }
        out.push(0x80 | bits);
    }
    out.push((v >> 56) as u8);
}

/// Decodes V2 bytes into a sparse histogram. Our own layout is read directly (a start loads
/// millions of rollups); anything else goes through hdrhistogram's deserializer.
pub(super) fn decode_v2(bytes: &[u8]) -> Result<Sparse, String> {
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
    Some(quantiles(ROLLUP, std::iter::empty(), &sparse, total, [q; 3])[0] as f64 / SCALE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::{Serializer, V2Serializer};
    use rand::{RngExt, SeedableRng};

    #[test]
    fn bucketing_matches_hdrhistogram() {
        let h = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("histogram");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut values: Vec<u64> = (0..20_000).map(|_| rng.random_range(1..=HIGHEST)).collect();
        values.extend([1, 2, 2047, 2048, 2049, 4095, 4096, 65_535, HIGHEST]);
        for v in values {
            let (low, width) = ROLLUP.bucket_range(index_for(v));
            assert_eq!(low, h.lowest_equivalent(v), "lowest of {v}");
            assert_eq!(low + width - 1, h.highest_equivalent(v), "highest of {v}");
        }
    }

    #[test]
    fn the_baseline_grain_is_hdrhistogram_at_two_digits_and_holds_whole_rollup_buckets() {
        let h = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, 2).expect("histogram");
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut values: Vec<u64> = (0..20_000).map(|_| rng.random_range(1..=HIGHEST)).collect();
        values.extend([1, 2, 255, 256, 257, 511, 512, 2047, 2048, 131_071, 131_072, HIGHEST]);
        for v in values {
            let (low, width) = BASELINE.bucket_range(BASELINE.index_for(v));
            assert_eq!(low, h.lowest_equivalent(v), "lowest of {v}");
            assert_eq!(low + width - 1, h.highest_equivalent(v), "highest of {v}");
            assert!(width == 1 || width * 128 <= low, "{v}: a bucket {width} wide at {low} is over 0.8 %");
        }
        // Every rollup bucket lies inside one baseline bucket, in order, so coarsening a sum is
        // the sum coarsened and an hour taken away from a fold leaves it exact.
        let mut last = 0;
        for index in 0..=index_for(HIGHEST) {
            let (low, width) = ROLLUP.bucket_range(index);
            let at = BASELINE.index_for(low);
            assert_eq!(at, BASELINE.index_for(low + width - 1), "rollup bucket {index} split");
            assert!(at >= last, "rollup bucket {index} out of order");
            last = at;
        }
        let (a, b) = (vec![(3000, 2), (3001, 1), (9000, 4)], vec![(3002, 5), (9001, 1)]);
        let both = sparse_merge(&a, &b, false);
        assert_eq!(
            BASELINE.coarsen(both.clone()),
            sparse_merge(&BASELINE.coarsen(a.clone()), &BASELINE.coarsen(b), false)
        );
        assert_eq!(sparse_total(&BASELINE.coarsen(both)), 13);
        assert!(BASELINE.coarsen(a).len() < 3, "neighbouring rollup buckets share a baseline bucket");
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
        let got = quantiles(ROLLUP, Packed::pack(a.clone()).iter(), &b, 5000, [0.5, 0.95, 0.99]);
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
        let bytes = encode_v2(&sparse);
        assert_eq!(decode_v2_fast(&bytes).expect("our layout"), sparse);
        let via_library: Histogram<u64> =
            Deserializer::new().deserialize(&mut std::io::Cursor::new(&bytes)).expect("library decode");
        let mut from_library = Sparse::new();
        for v in via_library.iter_recorded() {
            sparse_insert(&mut from_library, index_for(v.value_iterated_to()), v.count_at_value() as u32);
        }
        assert_eq!(from_library, sparse);
    }

    /// What hdrhistogram's own serializer writes for the same counts.
    fn library_bytes(sparse: &[(u32, u32)]) -> Vec<u8> {
        let mut h = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("histogram");
        for &(index, count) in sparse {
            h.record_n(ROLLUP.bucket_range(index).0, u64::from(count)).expect("record");
        }
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&h, &mut bytes).expect("serialize");
        bytes
    }

    #[test]
    fn v2_bytes_are_the_libraries_byte_for_byte() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut cases: Vec<Sparse> = vec![
            Vec::new(),
            vec![(0, 1)],
            vec![(1, 1)],
            vec![(2, 3)],
            vec![(0, 2), (2, 5)],
            vec![(index_for(HIGHEST), u32::MAX)],
            vec![(7, 1), (8, 1), (10, 1), (13, 70_000)],
        ];
        for _ in 0..200 {
            let mut sparse = Sparse::new();
            for _ in 0..rng.random_range(1..300) {
                let v = if rng.random::<bool>() { rng.random_range(1..5_000) } else { rng.random_range(1..HIGHEST) };
                sparse_insert(&mut sparse, index_for(v), rng.random_range(1..100_000));
            }
            cases.push(sparse);
        }
        for sparse in cases {
            assert_eq!(encode_v2(&sparse), library_bytes(&sparse), "{sparse:?}");
        }
        // A pair counting nothing is an empty bucket to the library too (it still moves the end).
        assert_eq!(encode_v2(&[(3, 2), (9, 0)]).len(), library_bytes(&[(3, 2), (9, 0)]).len());
        assert_eq!(encode_v2(&[(3, 2), (9, 0)]), library_bytes(&[(3, 2), (9, 0)]));
    }

    /// A merge that still fits the histogram's granule writes into the same buffer; one that
    /// outgrows it moves to a buffer of the new size's granule, and one that leaves it a granule
    /// or more too large moves to a smaller one.
    #[test]
    fn a_merge_keeps_its_buffer_while_it_fits_and_moves_to_the_granule_of_its_size() {
        assert_eq!([1, 16, 17, 24, 25, 40, 41].map(granule), [24, 24, 24, 24, 40, 40, 56]);
        let mut p = Packed::pack((1..=20).map(|i| (i, 1)));
        assert_eq!((p.0.len(), p.0.capacity()), (10, 24), "twenty next-bucket entries in ten bytes");
        let at = p.0.as_ptr();
        p.merge(&[(21, 1), (22, 1)], false);
        assert_eq!((p.0.as_ptr(), p.0.len()), (at, 11), "grown within its granule, in place");
        let wide: Sparse = (1..200).map(|i| (100 + 9 * i, 20)).collect();
        p.merge(&wide, false);
        assert!(p.0.len() > 24 && p.0.capacity() == granule(p.0.len()), "{} in {}", p.0.len(), p.0.capacity());
        p.merge(&wide, true);
        assert_eq!((p.0.len(), p.0.capacity()), (11, 24), "back to the small one's granule");
        assert_eq!(p.unpack(), (1..=22).map(|i| (i, 1)).collect::<Sparse>());
        assert_eq!(p.clone().0.capacity(), 24, "a copy in its granule too");
    }

    #[test]
    fn packed_histograms_round_trip_merge_and_subtract() {
        let entries: Sparse = vec![(0, 1), (5, 300), (21_000, 70_000), (21_503, u32::MAX)];
        let p = Packed::pack(entries.clone());
        assert_eq!(p.unpack(), entries);
        assert!(p.0.len() < 8 * entries.len());
        assert!(Packed::pack([(1, 1), (2, 2)]).0.len() == 1, "two next-bucket entries, one byte");
        let added = p.merged(&[(5, 1), (6, 2)], false).unpack();
        assert_eq!(added, [(0, 1), (5, 301), (6, 2), (21_000, 70_000), (21_503, u32::MAX)]);
        assert_eq!(p.merged(&[(5, 300)], true).unpack(), [(0, 1), (21_000, 70_000), (21_503, u32::MAX)]);
    }

    #[test]
    fn packed_nibbles_round_trip_every_kind_of_entry() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let mut cases: Vec<Sparse> = vec![
            Vec::new(),
            vec![(0, 0)],
            vec![(0, 14), (1, 15), (2, 16), (3, 0), (4, 1)],
            vec![(1, 1), (2, u32::MAX), (3, 14), (u32::MAX, 7)],
            vec![(index_for(HIGHEST), u32::MAX)],
            // An odd number of nibbles ends on a padded byte.
            vec![(1, 3)],
            vec![(1, 3), (2, 3), (3, 3)],
        ];
        for _ in 0..300 {
            let mut sparse = Sparse::new();
            for _ in 0..rng.random_range(1..400) {
                let count = if rng.random::<bool>() { rng.random_range(1..20) } else { rng.random_range(0..u32::MAX) };
                sparse_insert(&mut sparse, rng.random_range(0..3_000), count);
            }
            cases.push(sparse);
        }
        for sparse in cases {
            let packed = Packed::pack(sparse.clone());
            assert_eq!(packed.unpack(), sparse, "{sparse:?}");
            assert_eq!(Packed::default().merged(&sparse, false).unpack(), sparse, "merged onto nothing");
        }
    }

    #[test]
    fn merges_that_copy_unchanged_runs_agree_with_merging_pairs() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(23);
        let draw = |rng: &mut rand::rngs::StdRng, n: usize, spread: u32, big: bool| {
            let mut h = Sparse::new();
            for _ in 0..n {
                let count = if big && rng.random_range(0..8) == 0 {
                    rng.random_range(15..100_000)
                } else {
                    rng.random_range(1..6)
                };
                sparse_insert(&mut h, rng.random_range(0..spread), count);
            }
            h
        };
        for case in 0..600 {
            let (n, spread) = (rng.random_range(0..3_000), rng.random_range(1..4_000));
            let fold = draw(&mut rng, n, spread, case % 3 == 0);
            let spread = rng.random_range(1..5_000);
            let hour = draw(&mut rng, [0, 1, 3, 60, 2_000][case % 5], spread, case % 2 == 0);
            let packed = Packed::pack(fold.clone());
            for subtract in [false, true] {
                let want = sparse_merge(&fold, &hour, subtract);
                let got = packed.merged(&hour, subtract);
                assert_eq!(got.unpack(), want, "case {case}, subtract {subtract}");
                assert_eq!(
                    got,
                    Packed::pack(want.iter().copied()),
                    "case {case}: the same nibbles as packing the result"
                );
            }
            // An hour added then taken away leaves the fold as it was.
            let back = packed.merged(&hour, false).merged(&hour, true);
            assert_eq!(back.unpack(), sparse_merge(&sparse_merge(&fold, &hour, false), &hour, true), "case {case}");
        }
    }

    #[test]
    fn quantiles_resumed_at_marks_agree_with_reading_from_the_start() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(19);
        let draw = |rng: &mut rand::rngs::StdRng, n: usize, spread: u32| {
            let mut h = Sparse::new();
            for _ in 0..n {
                sparse_insert(&mut h, 20_000 + rng.random_range(0..spread), rng.random_range(1..4));
            }
            h
        };
        let qs_all = [PUBLISHED, [0.0, 0.001, 1.0], [0.3, 0.3, 0.3], [0.999, 0.9999, 1.0]];
        for case in 0..400 {
            let (n, spread) = (rng.random_range(0..3_000), rng.random_range(1..4_000));
            let fold = Packed::pack(draw(&mut rng, n, spread));
            // Recent hours from none to more than the marks' margin, anywhere in the range.
            let spread = rng.random_range(1..6_000);
            let recent = draw(&mut rng, [0, 5, 60, 500, 4_000][case % 5], spread);
            let total = fold.iter().map(|e| u64::from(e.1)).sum::<u64>() + sparse_total(&recent);
            if total == 0 {
                continue;
            }
            for qs in qs_all {
                let want = quantiles(ROLLUP, fold.iter(), &recent, total, qs);
                assert_eq!(fold.quantiles(ROLLUP, &recent, total, qs), want, "case {case}, {qs:?}");
            }
        }
        // The marks are where reading entry by entry puts them.
        for case in 0..200 {
            let (n, spread) = (rng.random_range(0..3_000), rng.random_range(1..4_000));
            let fold = Packed::pack(draw(&mut rng, n, spread));
            let total = fold.iter().map(|e| u64::from(e.1)).sum::<u64>();
            let limits = PUBLISHED.map(|q| ((q * total as f64) as u64).saturating_sub(total / 64 + 64));
            let (mut want, mut it, mut below) = ([(0, 0, 0, 0); 3], fold.iter(), 0u64);
            loop {
                let (nibble, index) = (it.nibble_offset(fold.0.len()), it.index);
                let Some((next, count)) = it.next() else { break };
                for (mark, limit) in want.iter_mut().zip(limits) {
                    if below <= limit {
                        *mark = (nibble, index, next, below);
                    }
                }
                below += u64::from(count);
            }
            let got = fold.marks(|| total).map(|m| (m.nibble, m.index, m.next, m.below));
            assert_eq!(got, want, "case {case}");
        }
        // The marks are kept with the histogram, and a merge makes a histogram without them.
        let fold = Packed::pack(draw(&mut rng, 2_000, 3_000));
        let before = fold.quantiles(ROLLUP, &[], 4_000, PUBLISHED);
        assert!(fold.1.get().is_some());
        let merged = fold.merged(&[(20_001, 5)], false);
        assert!(merged.1.get().is_none());
        assert_eq!(
            merged.quantiles(ROLLUP, &[], 4_005, PUBLISHED),
            quantiles(ROLLUP, merged.iter(), &[], 4_005, PUBLISHED)
        );
        assert_eq!(before, quantiles(ROLLUP, fold.iter(), &[], 4_000, PUBLISHED));
    }

    #[test]
    fn a_week_of_latencies_packs_under_a_byte_an_entry() {
        // 10,080 log-normal values (a week of one probe a minute) around 100 ms, one in a hundred
        // five times slower, as the baselines bench draws them.
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let mut week = Sparse::new();
        for _ in 0..10_080 {
            let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
            let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let spike = if rng.random::<f64>() < 0.01 { 5.0 } else { 1.0 };
            let ms: f64 = 100.0 * spike * (0.25 * normal).exp();
            sparse_insert(&mut week, index_for(to_recorded(ms).expect("finite")), 1);
        }
        let packed = Packed::pack(week.clone());
        assert_eq!(packed.unpack(), week);
        assert!(week.len() > 1_000, "{} buckets", week.len());
        assert!(packed.0.len() < week.len(), "{} bytes for {} entries", packed.0.len(), week.len());
        // The fold holds the week at the baseline grain: under half the bytes.
        let fold = Packed::pack(BASELINE.coarsen(week.iter().copied()));
        assert!(fold.0.len() * 2 < packed.0.len(), "{} bytes at two digits, {} at three", fold.0.len(), packed.0.len());
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
}
