//! The sparse histogram codec: hdrhistogram's bucket layout held as (bucket index, count) pairs,
//! packed in memory, merged and queried by nearest rank, and read and written as V2 bytes.

use crate::vocab::records::Rollup;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;

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
const HALF_COUNT: u32 = 1 << HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (2 * HALF_COUNT as u64) - 1;
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_HEADER_LEN: usize = 40;

/// Sparse histogram: (hdrhistogram bucket index, count), ascending by index.
pub(super) type Sparse = Vec<(u32, u32)>;

/// hdrhistogram's bucket index of a value (after clamping to the recordable range).
pub(super) fn index_for(value: u64) -> u32 {
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

/// Nearest-rank quantiles (as hdrhistogram computes them) over the sum of two sparse histograms.
pub(super) fn quantiles(a: impl Iterator<Item = (u32, u32)>, b: &[(u32, u32)], total: u64, qs: [f64; 3]) -> [u64; 3] {
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
pub(super) struct Packed(Box<[u8]>);

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Packed {
    pub(super) fn pack(entries: impl IntoIterator<Item = (u32, u32)>) -> Packed {
        let mut out = Vec::new();
        let mut previous = 0;
        for (index, count) in entries {
            put_varint(&mut out, index - previous);
            put_varint(&mut out, count);
            previous = index;
        }
        Packed(out.into_boxed_slice())
    }

    pub(super) fn iter(&self) -> PackedIter<'_> {
        PackedIter { bytes: &self.0, pos: 0, index: 0 }
    }

    pub(super) fn unpack(&self) -> Sparse {
        self.iter().collect()
    }

    /// `self ± other` as a new packed histogram, streamed without unpacking `self`.
    pub(super) fn merged(&self, other: &[(u32, u32)], subtract: bool) -> Packed {
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

pub(super) struct PackedIter<'a> {
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
    Some(quantiles(std::iter::empty(), &sparse, total, [q; 3])[0] as f64 / SCALE)
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
            h.record_n(bucket_range(index).0, u64::from(count)).expect("record");
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
}
